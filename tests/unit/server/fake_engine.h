// FakeEngine: a deterministic engine::ServingEngine for front-end tests. One "engine
// thread" emits one token per running sample per tick; the text is a script cycled from
// an offset that depends on the seed and sample (so the same seed gives the same text),
// encoded like FakeTextCodec (byte + 3). A prompt that contains "<<reply>>TEXT<</reply>>"
// gets exactly TEXT and then EOS (tests script tool calls and reasoning that way). Tests can pause generation, make Submit fail,
// bound the queue, and observe submissions and aborts.
//
//   Submit ─► waiting_ ─(max_running)─► running_ ─tick─► TokenStream.push(...) ─► final + usage
//   Abort  ─► marks the request; the next tick (or at once when paused) ends it with kAbort
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_factory.h"

namespace kvserve::server::testing {

struct FakeEngineOptions {
  std::string script = "The quick brown fox jumps over the lazy dog. ";
  std::chrono::microseconds tick{0};  // time per engine step (0: as fast as possible)
  int64_t max_model_len = 2048;
  int max_running = 0;                // 0: unlimited
  int max_waiting = 0;                // 0: unlimited; beyond it Submit is ResourceExhausted
  std::map<std::string, int> tenant_max_in_flight;  // per tenant; beyond it ResourceExhausted
  int eos_after = 0;                  // >0: emit EOS after this many tokens (unless ignore_eos)
};

class FakeEngine final : public engine::ServingEngine {
 public:
  explicit FakeEngine(FakeEngineOptions options = {});
  ~FakeEngine() override;

  absl::StatusOr<std::shared_ptr<engine::TokenStream>> Submit(engine::RequestSpec spec) override;
  void Abort(const std::string& request_id) override;
  engine::EngineStats Stats() const override;
  void StartDrain() override;
  int InFlight() const override;
  void AbortAll() override;
  int64_t max_model_len() const override { return options_.max_model_len; }

  // Test controls.
  void SetPaused(bool paused);             // paused: accepted requests produce nothing
  void FailNextSubmit(absl::Status status);
  void SetAlive(bool alive);

  // Observations.
  std::vector<engine::RequestSpec> submitted() const;
  std::vector<std::string> aborted() const;
  // Waits until Abort(id) has been called; returns when it was, or nullopt on timeout.
  std::optional<std::chrono::steady_clock::time_point> WaitForAbort(const std::string& id,
                                                                    std::chrono::milliseconds timeout);
  // Waits until `count` requests have been submitted in total.
  bool WaitForSubmitted(size_t count, std::chrono::milliseconds timeout);
  // The text sample `sample` of a request with `seed` and `temperature` generates first.
  std::string ExpectedText(std::optional<uint64_t> seed, float temperature, int sample, int tokens) const;

 private:
  struct Request {
    engine::RequestSpec spec;
    std::shared_ptr<engine::TokenStream> stream;
    std::string reply;              // scripted reply ("" : the cycled script)
    std::vector<int> produced;      // per sample
    std::vector<bool> finished;     // per sample
    int64_t completion_tokens = 0;
    bool aborted = false;
  };

  void Run();
  // Emits one token per unfinished sample; returns false once the request is over.
  bool Step(Request& r);
  void Finish(Request& r, engine::FinishReason reason);
  size_t ScriptOffset(const engine::RequestSpec& spec, int sample) const;
  static std::string ScriptedReply(const std::vector<int32_t>& prompt);

  const FakeEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // wakes the engine thread
  std::condition_variable observe_cv_;  // wakes tests waiting on observations
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  std::vector<engine::RequestSpec> submitted_;
  std::vector<std::string> aborted_;
  std::map<std::string, std::chrono::steady_clock::time_point> abort_times_;
  std::optional<absl::Status> fail_next_;
  bool paused_ = false;
  bool draining_ = false;
  bool alive_ = true;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvserve::server::testing
