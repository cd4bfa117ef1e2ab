// TriAttention key scores in the "virtual query" form, computed straight on the cached
// (RoPE-rotated) keys, so no per-slot position is needed.
//
// For query head h, frequency pair f (dims f and f + F of the "half" layout, F = head_dim/2),
// calibrated centre A_hf (complex) and mean magnitude M_hf, RoPE frequency w_f, attention
// scaling s, next position t and a cached key whose pair f is kappa_f (cached / s):
//
//   C_f  = mean over delta in {1, 2, 4, ..., 2^16} of exp(i w_f (t + delta))
//          (phases in float64, reduced mod 2*pi: t + delta exceeds 1e5 rad at w_0 = 1)
//   u_hf = s^2 * A_hf * C_f                 the "virtual query", one per (head, pair)
//   c_hf = max(0, s^2 * (M_hf - |A_hf|))    norm weight (M >= |A|, clamped against rounding)
//
//   S_h(key) = sum_f Re(u_hf) Re(kappa_f) + Im(u_hf) Im(kappa_f)      mean trig term
//            + sum_f c_hf |kappa_f|                                   norm term
//
// Because mean aggregation is linear, the trig term is the mean over future query positions
// tau = t + delta of sum_f s^2 Re(A_hf conj(k_f) e^{i w_f (tau - p)}) with k the pre-RoPE key at
// its position p: rotation by p cancels against the cache's own rotation. Accumulated in
// float64; one instance per policy, Prepare once per round.
#pragma once

#include <cstdint>
#include <vector>

#include "compression/triattention_stats.h"

namespace kvserve::compression {

inline constexpr int kTriAttentionNumOffsets = 17;  // offsets 2^0 .. 2^16

class TriAttentionScorer {
 public:
  // `stats` must outlive the scorer and be ValidateStats-clean.
  explicit TriAttentionScorer(const TriAttentionStats& stats);

  // Phasors C_f for a round whose next token has absolute position next_position.
  void Prepare(int64_t next_position);

  // keys: [n][head_dim] cached keys of (layer, kv_head), dequantized.
  // out:  [group][n] scores; row g belongs to query head kv_head * group + g.
  void ScoreKvHead(int layer, int kv_head, const float* keys, int64_t n, double* out);

  int group_size() const { return group_; }
  double phasor_re(int f) const { return c_re_[static_cast<size_t>(f)]; }
  double phasor_im(int f) const { return c_im_[static_cast<size_t>(f)]; }

 private:
  const TriAttentionStats& stats_;
  int freqs_;
  int head_dim_;
  int group_;
  std::vector<double> c_re_, c_im_;  // [F]
  std::vector<double> w_;            // [group][head_dim] virtual queries of the current KV head
  std::vector<double> c_;            // [group][F] norm weights
  std::vector<double> mag_;          // [n][F] |kappa_f| of the current keys
};

}  // namespace kvserve::compression
