// Helpers of the engine integration tests: an observer that counts preemptions, batch
// sizes and blocks in use (and can hold the engine's first step), the no-leak check, and
// greedy request building and collection.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_factory.h"

namespace kvserve::engine {

// Counts preemptions and the largest batch, and keeps the KV blocks in use after the latest
// step: ServingEngine does not expose its cache, and the final step's report is the
// engine's last word on it (a finished sequence frees its blocks inside that step).
//
// Gate: with Hold(), the engine thread blocks at the end of its first step until Release(),
// so every request the test submits meanwhile is in flight together whatever the machine's
// load (otherwise a descheduled test thread lets the engine finish early requests before
// the later ones arrive, and the batch or the preemption the test relies on never happens).
class CountingObserver : public EngineObserver {
 public:
  void Hold() { held_ = true; }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  void OnStep(const StepStats& s) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Bounded, so a failed ASSERT before Release() cannot hang the engine's destructor.
      cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !held_; });
    }
    preemptions += s.preemptions;
    max_batch = std::max(max_batch.load(), s.num_seqs);
    used_blocks = s.blocks_total - s.blocks_free;
    peak_used_blocks = std::max(peak_used_blocks.load(), used_blocks.load());
    host_used_blocks = s.host_blocks_used;
  }
  std::atomic<int> preemptions{0};
  std::atomic<int> max_batch{0};
  std::atomic<int64_t> used_blocks{-1};
  std::atomic<int64_t> peak_used_blocks{0};
  std::atomic<int64_t> host_used_blocks{-1};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

// Destroys the engine (joining its loop, so its last step has been reported) once every
// request's stream is done, then checks that no KV block is still held.
inline void ExpectNoBlocksLeaked(std::unique_ptr<ServingEngine>& engine,
                                 const CountingObserver& obs, const std::string& where) {
  ASSERT_NE(engine, nullptr);
  engine.reset();
  ASSERT_GT(obs.peak_used_blocks.load(), 0)
      << where << ": the step reports never showed a used block";
  EXPECT_EQ(obs.used_blocks.load(), 0)
      << where << ": KV blocks still used after every request ended";
  EXPECT_EQ(obs.host_used_blocks.load(), 0) << where << ": host swap blocks still used";
}

inline std::vector<int32_t> Prompt(int len, int salt, int vocab) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(3 + (i * 37 + salt * 101) % (vocab - 3));
  return p;
}

inline RequestSpec Greedy(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec s;
  s.request_id = id;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0.0f;
  return s;
}

// The stream's tokens; `finish` and `usage`, when given, get the last ones the events carry.
inline std::vector<int32_t> Collect(TokenStream& stream, FinishReason* finish = nullptr,
                                    RequestUsage* usage = nullptr) {
  std::vector<int32_t> out;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    out.insert(out.end(), e->token_ids.begin(), e->token_ids.end());
    if (e->finish && finish != nullptr) *finish = *e->finish;
    if (e->usage && usage != nullptr) *usage = *e->usage;
  }
  return out;
}

// Adds the engine's speculative decoding figures to the counting observer.
class SpecObserver : public CountingObserver {
 public:
  void OnStep(const StepStats& s) override {
    CountingObserver::OnStep(s);
    drafts += s.spec_drafts;
    draft_tokens += s.spec_draft_tokens;
    accepted += s.spec_accepted_tokens;
  }
  std::atomic<int64_t> drafts{0}, draft_tokens{0}, accepted{0};
};

// A stream's tokens and their logprobs (exactness checks compare both).
struct TokensAndLogprobs {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  bool operator==(const TokensAndLogprobs& o) const = default;
};

// `usage`, when given, gets the request's usage (its last event's).
inline TokensAndLogprobs CollectWithLogprobs(TokenStream& stream, RequestUsage* usage = nullptr) {
  TokensAndLogprobs out;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    if (usage != nullptr && e->usage) *usage = *e->usage;
    out.tokens.insert(out.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    for (const auto& lp : e->logprobs) out.logprobs.push_back(lp.logprob);
  }
  return out;
}

}  // namespace kvserve::engine
