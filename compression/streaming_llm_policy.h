// `streamingllm` (arXiv 2309.17453): attention sinks plus a recent window; everything in
// between is evicted. No scores, the same set for every (layer, KV head).
//
//   slots: [0, lo) sinks / pinned prompt | ...... evicted ...... | [n - window, n) recent
//          lo = max(sinks, P if protect_prompt else 0)
//
// Target length lo + window (the budget setting is not used); a round runs once the
// sequence holds lo + window + divide_length slots. Kept keys keep their original RoPE
// rotation (no re-rotation to contiguous positions), so positions past the model's trained
// context are not made reachable.
#pragma once

#include "compression/compression_policy.h"

namespace kvserve::compression {

class StreamingLlmPolicy final : public CompressionPolicy {
 public:
  StreamingLlmPolicy(const PolicyParams& params, const PolicyContext& context) : CompressionPolicy(params, context) {}

 protected:
  absl::Status SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                          RoundResult& timings) override;
};

}  // namespace kvserve::compression
