// Prompt logprobs (vLLM's prompt_logprobs, completions' echo with logprobs): the logprob of
// each prompt token under the model, read from the prefill's own logits. Two halves:
//
//   runner:  ScorePromptRows — the logits rows of one prefill chunk ──► PromptLogprob entries
//            (row at position p scores the prompt token at p + 1; the first prompt token has
//            no context and no entry, the last row of the prompt predicts the first output)
//   engine:  PromptLogprobsBook — per request, the entries in position order, each position
//            kept once (a preempted sequence recomputes its prefill and reports it again)
//
// Prefix-cache hits skip computing the hit positions' rows, so the engine gives a scoring
// request a prefix key of its own (no hits from other requests; see Engine::AddRequest).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request_types.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

// Prefill chunks of a scoring sequence are capped at this many tokens, so its logits rows
// (tokens x vocab floats) stay bounded whatever the step's token budget.
inline constexpr int32_t kPromptScoringChunk = 256;

// Log-softmax of the raw rows `logits` ([rows x vocab], row j at position first_position + j)
// for the prompt tokens they predict (`prompt`: every prompt token); `top` alternatives each.
// `order` is vocab-sized scratch.
void ScorePromptRows(cache::SeqId seq, std::span<const int32_t> prompt, int64_t first_position,
                     std::span<const float> logits, int vocab, int top, std::vector<int32_t>& order,
                     std::vector<scheduler::PromptLogprob>& out);

// One request's prompt logprobs as the engine collects them from step results.
class PromptLogprobsBook {
 public:
  // Appends `e` when it scores the next position not yet held (position 1 first).
  void Add(const scheduler::PromptLogprob& e);
  // The entries held, once: later calls return nothing.
  std::vector<TokenLogprobs> Take();

 private:
  std::vector<TokenLogprobs> entries_;  // entries_[i] scores position i + 1
  bool taken_ = false;
};

}  // namespace kvserve::engine
