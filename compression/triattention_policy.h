// `triattention` (arXiv 2604.04921): score every evictable cached key by how much the
// calibrated query centres of its layer are expected to attend to it over the future offsets
// {1, 2, 4, ..., 2^(M-1)} (triattention_scorer.h; 2^(M-1) <= the model's context unless
// tri_max_offset says otherwise), then keep the best.
//
//   candidates [lo, n - W) scored; the recent window [n - W, n) is always kept.
//   per layer l, KV head k:
//     S_l[h][j]  for the G query heads of k      (scorer, float64, the model's RoPE table)
//     Z_l[h][j]  = z-normalise S_l[h] over j       (per query head)
//     R_l[j]     = max over h of Z_l[h][j]         (GQA group: max)
//   cross-layer (default, the reference's `per_head`):
//     R[j] = mean over layers of R_l[j]; one top-(B - lo - W) set per KV head, used by
//     every layer (all layers of a KV head then hold the same tokens)
//   per-layer (tri_selection = kPerLayer): top-(B - lo - W) of R_l per (layer, KV head)
//   ties -> lowest slot; kept slots ascending.
//
//   slots: [0, lo) pinned | scored candidates ......... | [n - W, n) recent window
//          protect_prompt:  lo = P,     W = 0            (the paper's setting: the prompt is
//                                                        the sink)
//          unprotected:     lo = sinks (4), W = window (128, at most half of B - sinks)
//
// Trigger: after a decode step once phys_len >= B + slack (policy_params.h), back to B.
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

 public:
  // The same scores SelectKeep ranks by (z-normalised over the m candidates together, max
  // over the group, and with cross-layer selection the mean over layers in every layer's row).
  absl::Status RankForDemotion(const RoundInput& in, int64_t m, KeyReader read_keys, std::span<double> scores,
                               RoundResult& timings) override;

 private:
  TriAttentionScorer scorer_;
  std::vector<float> keys_;      // [m][head_dim]
  std::vector<double> scores_;   // [group][m]
  std::vector<double> pooled_;   // [m] one layer's R_l
  // Batched backend scoring (KvAccess::ScoreTriAttentionAll): every head's weights, copied
  // out of the scorer (its views last until the next PrepareKvHead), and every head's R_l.
  std::vector<std::vector<double>> head_weights_;  // [layers * kv_heads]: w then c
  std::vector<TriKeyWeights> batch_weights_;       // views into head_weights_
  std::vector<double> batch_pooled_;               // [layers * kv_heads][m]
  std::vector<double> summed_;   // [num_kv_heads][m] cross-layer sum of R_l
  std::vector<int32_t> chosen_;  // [num_keep] one row's keep list
  std::vector<int32_t> topk_scratch_;
};

}  // namespace kvserve::compression
