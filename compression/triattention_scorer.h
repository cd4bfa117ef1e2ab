// TriAttention key scores in the "virtual query" form, computed straight on the cached
// (RoPE-rotated) keys, so no per-slot position is needed.
//
// For query head h, frequency pair f (dims f and f + F of the "half" layout, F = head_dim/2),
// calibrated centre A_hf (complex) and mean magnitude M_hf, RoPE frequency w_f (the model's
// own table), attention scaling s, next position t and a cached key whose pair f is
// kappa_f (cached / s), for each future offset delta in D = {1, 2, 4, ..., 2^(M-1)}:
//
//   C_f(delta) = exp(i w_f (t + delta))      (phases in float64, reduced mod 2*pi)
//   u_hf       = s^2 * A_hf * C_f            the "virtual query", one per (head, pair[, offset])
//   c_hf       = max(0, s^2 * (M_hf - |A_hf|))    norm weight (M >= |A|, clamped)
//
//   trig_h(key, delta) = sum_f Re(u_hf) Re(kappa_f) + Im(u_hf) Im(kappa_f)
//   norm_h(key)        = sum_f c_hf |kappa_f|
//   S_h(key) = pool over delta of trig_h(key, delta)  +  norm_h(key)
//
// pool = mean (the paper's default; linear, so one virtual query built from the mean
// phasor serves all offsets) or max (an ablation: M virtual queries per head). Ablations
// drop a term: trig-only (S = pooled trig) or norm-only (S = norm). M defaults to 17
// (offsets up to 2^16, the reference's); the policy caps it at the model's context
// (NumOffsetsFor). Because of linearity the mean trig term equals the mean over future
// query positions tau = t + delta of sum_f s^2 Re(A_hf conj(k_f) e^{i w_f (tau - p)}) with k the
// pre-RoPE key at its position p: rotation by p cancels against the cache's own rotation.
// Accumulated in float64; one instance per policy, Prepare once per round.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compression/kv_access.h"
#include "compression/policy_params.h"
#include "compression/triattention_stats.h"

namespace kvserve::compression {

inline constexpr int kTriAttentionNumOffsets = 17;  // offsets 2^0 .. 2^16 (the reference's)

// Offsets 2^0 .. 2^(M-1) with 2^(M-1) <= max_offset (max_offset <= 0: all 17); at least 1.
int NumOffsetsFor(int64_t max_offset);

struct TriScorerOptions {
  int num_offsets = kTriAttentionNumOffsets;
  TriScoreTerms terms = TriScoreTerms::kBoth;
  TriOffsetPool offset_pool = TriOffsetPool::kMean;
};

class TriAttentionScorer {
 public:
  // `stats` must outlive the scorer and be ValidateStats-clean; `inv_freq` ([head_dim / 2],
  // the model's RoPE table) must outlive it too.
  TriAttentionScorer(const TriAttentionStats& stats, std::span<const float> inv_freq, const TriScorerOptions& options);
  // The stats file's own RoPE table, 17 offsets, both terms, mean (tests, tools).
  explicit TriAttentionScorer(const TriAttentionStats& stats);

  // Phasors C_f(delta) for a round whose next token has absolute position next_position.
  void Prepare(int64_t next_position);

  // keys: [n][head_dim] cached keys of (layer, kv_head), dequantized.
  // out:  [group][n] scores; row g belongs to query head kv_head * group + g.
  // = PrepareKvHead(layer, kv_head) then ScoreKeys(keys, n, out).
  void ScoreKvHead(int layer, int kv_head, const float* keys, int64_t n, double* out);

  // The weights of (layer, kv_head) after Prepare: virtual queries and norm weights, valid
  // until the next PrepareKvHead (a device backend scores with them: KvAccess::ScoreTriAttention).
  TriKeyWeights PrepareKvHead(int layer, int kv_head);
  // Scores keys with the weights of the last PrepareKvHead (as ScoreKvHead).
  void ScoreKeys(const float* keys, int64_t n, double* out);

  int group_size() const { return group_; }
  int num_offsets() const { return options_.num_offsets; }
  // The mean phasor over the offsets.
  double phasor_re(int f) const { return c_re_[static_cast<size_t>(f)]; }
  double phasor_im(int f) const { return c_im_[static_cast<size_t>(f)]; }

 private:
  const TriAttentionStats& stats_;
  std::vector<double> inv_freq_;  // [F]; empty: the stats file's table
  TriScorerOptions options_;
  int freqs_;
  int head_dim_;
  int group_;
  std::vector<double> c_re_, c_im_;    // [F] mean phasor
  std::vector<double> o_re_, o_im_;    // [M][F] per-offset phasors (max pooling)
  std::vector<double> w_;              // [P][group][head_dim] virtual queries, P = 1 (mean) or M
  std::vector<double> c_;              // [group][F] norm weights
  std::vector<double> mag_;            // [n][F] |kappa_f| of the current keys
};

}  // namespace kvserve::compression
