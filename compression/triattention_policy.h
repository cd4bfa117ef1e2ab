// `triattention` (arXiv 2604.04921): score every evictable cached key by how much the
// calibrated query centres of its layer are expected to attend to it over the future offsets
// {1, 2, 4, ..., 2^16} (triattention_scorer.h), then keep the best per (layer, KV head).
//
//   per layer l, KV head k, candidates [lo, n):
//     S[h][j]  for the G query heads of k         (scorer, float64)
//     Z[h][j]  = z-normalise S[h] over j           (per query head)
//     R[j]     = max over h of Z[h][j]             (GQA group: max)
//     keep     = top-(B - lo) of R, ties -> lowest slot, ascending
//
//   slots: [0, lo) pinned prompt | candidates ...... n-1      lo = P if protect_prompt else 0
//          budget B counts the prompt; no recent window and no sinks (the paper's setting:
//          pinning the prompt plays the sinks' role); the window/sinks settings do not apply.
//
// Trigger: phys_len >= B + divide_length, back to B. Each KV head of each layer keeps its own
// set of B - lo candidates, so one block table still serves every head.
#pragma once

#include <vector>

#include "compression/compression_policy.h"
#include "compression/triattention_scorer.h"

namespace kvserve::compression {

class TriAttentionPolicy final : public CompressionPolicy {
 public:
  // context.triattention_stats must be set and match the model.
  TriAttentionPolicy(const PolicyParams& params, const PolicyContext& context);

 protected:
  absl::Status SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                          RoundResult& timings) override;

 private:
  TriAttentionScorer scorer_;
  std::vector<float> keys_;      // [n - lo][head_dim]
  std::vector<double> scores_;   // [group][n - lo]
  std::vector<double> pooled_;   // [n - lo]
  std::vector<int32_t> topk_scratch_;
};

}  // namespace kvserve::compression
