// `snapkv` (arXiv 2404.14469): the last `window` queries predict which earlier keys matter.
//
//   slots: [0, lo) pinned | candidates [lo, n - w) scored | [n - w, n) observation window
//
//   per layer l, query head h (post-RoPE query rows q_r of the last w tokens, kept as
//   pre-RoPE rows + positions in the SlotState's ring and rotated at round time with the
//   model's RoPE table and kernels, bit-identical to the forward pass):
//     a_h[j]   = sum_r softmax_j(q_r . k_j / sqrt(d)) over the keys the query saw
//                (causal by absolute position), for j in [0, n - w)
//     p_h[j]   = avg-pool, kernel 5, stride 1, zero padding, divide by 5 (PyTorch avg_pool1d
//                with count_include_pad), over [0, n - w)
//     R[j]     = mean of p_h over the query heads h of the KV group
//   keep per (layer, KV head): the whole window (+inf) and the top of R, K = B - lo in all
//
// When: once right after prefill if the prompt exceeds B (only reachable with
// protect_prompt = false, since a pinned prompt must fit in B), and during decode whenever
// the sequence holds B + divide_length slots (the decode-time variant, using the last w
// queries). Never in the middle of a chunked prefill.
#pragma once

#include <vector>

#include "compression/compression_policy.h"

namespace kvserve::compression {

inline constexpr int kSnapKvPoolKernel = 5;

class SnapKvPolicy final : public CompressionPolicy {
 public:
  SnapKvPolicy(const PolicyParams& params, const PolicyContext& context) : CompressionPolicy(params, context) {}

  bool Due(int64_t phys_len, int64_t next_position) const override;
  ObserverNeeds needs() const override { return {.attention_mass = false, .pre_rope_queries = true}; }
  SlotState NewSlotState() const override;

 protected:
  absl::Status SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                          RoundResult& timings) override;

 private:
  std::vector<float> queries_;    // [w][num_q_heads * head_dim], rotated
  std::vector<int32_t> qpos_;     // [w]
  std::vector<std::vector<int64_t>> seen_;  // [kv heads][w] slots each window row attended
  std::vector<SnapKvWindow> windows_;        // [kv heads] one layer's windows
  std::vector<double> layer_rows_;           // [kv heads][n - lo] a batching backend's scores
  std::vector<float> cos_sin_;    // [w][head_dim]
  std::vector<float> keys_;       // [n][head_dim]
  std::vector<double> logits_;    // [n]
  std::vector<double> attn_;      // [n - w]
  std::vector<double> row_;       // [n - lo] pooled, group mean, guards
  std::vector<int32_t> topk_scratch_;
};

}  // namespace kvserve::compression
