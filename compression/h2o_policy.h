// `h2o` (Heavy-Hitter Oracle, arXiv 2306.14048): every cached key accumulates the attention
// probability it receives from every query of every step (prefill rows included), summed
// over the query heads of its KV group (ForwardObservers::attention_mass, fed through
// ObserveAttentionMass into the SlotState's mass rows, which compaction moves with the KV).
//
//   slots: [0, lo) pinned | candidates ......................... | recent R | (n)
//          K = B - lo kept per (layer, KV head):
//            R = K / 2 most recent slots (always kept)
//            K - R heavy hitters: the largest accumulated mass among the other candidates
//          optional NORM: rank by mass / (t - position), the number of queries that could
//          attend to the key, so old tokens are not favoured just for being old.
//
// Batched rather than greedy: a round runs at B + divide_length and evicts back to B (the
// same slack trigger as triattention), ties -> lowest slot.
#pragma once

#include <vector>

#include "compression/compression_policy.h"

namespace kvserve::compression {

class H2OPolicy final : public CompressionPolicy {
 public:
  H2OPolicy(const PolicyParams& params, const PolicyContext& context) : CompressionPolicy(params, context) {}

  ObserverNeeds needs() const override { return {.attention_mass = true, .pre_rope_queries = false}; }
  SlotState NewSlotState() const override;

 protected:
  absl::Status SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                          RoundResult& timings) override;

 private:
  std::vector<double> scores_;
  std::vector<int32_t> topk_scratch_;
};

}  // namespace kvserve::compression
