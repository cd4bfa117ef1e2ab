#include "compression/triattention_scorer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"

namespace kvserve::compression {

TriAttentionScorer::TriAttentionScorer(const TriAttentionStats& stats)
    : stats_(stats),
      freqs_(stats.num_freqs()),
      head_dim_(stats.head_dim),
      group_(stats.num_q_heads / stats.num_kv_heads),
      c_re_(static_cast<size_t>(freqs_)),
      c_im_(static_cast<size_t>(freqs_)),
      w_(static_cast<size_t>(group_) * head_dim_),
      c_(static_cast<size_t>(group_) * freqs_) {}

void TriAttentionScorer::Prepare(int64_t next_position) {
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  for (int f = 0; f < freqs_; ++f) {
    const double omega = stats_.inv_freq[static_cast<size_t>(f)];
    double re = 0.0, im = 0.0;
    for (int m = 0; m < kTriAttentionNumOffsets; ++m) {
      const double tau = static_cast<double>(next_position + (int64_t{1} << m));
      const double phase = std::fmod(tau * omega, kTwoPi);
      re += std::cos(phase);
      im += std::sin(phase);
    }
    c_re_[static_cast<size_t>(f)] = re / kTriAttentionNumOffsets;
    c_im_[static_cast<size_t>(f)] = im / kTriAttentionNumOffsets;
  }
}

void TriAttentionScorer::ScoreKvHead(int layer, int kv_head, const float* keys, int64_t n, double* out) {
  const int F = freqs_;
  const int d = head_dim_;
  const double s = stats_.attention_scaling;
  const double s2 = s * s;
  const double inv_s = 1.0 / s;  // cached keys carry s once; kappa = cached / s
  for (int g = 0; g < group_; ++g) {
    const int h = kv_head * group_ + g;
    double* w = w_.data() + static_cast<size_t>(g) * d;
    double* c = c_.data() + static_cast<size_t>(g) * F;
    for (int f = 0; f < F; ++f) {
      const FreqStat& st = stats_.at(layer, h, f);
      const double cr = c_re_[static_cast<size_t>(f)], ci = c_im_[static_cast<size_t>(f)];
      // u = s^2 * A * C; folding 1/s in here scores the cached keys directly.
      w[f] = s2 * (st.a_re * cr - st.a_im * ci) * inv_s;
      w[f + F] = s2 * (st.a_re * ci + st.a_im * cr) * inv_s;
      c[f] = std::max(0.0, s2 * (st.m - std::hypot(st.a_re, st.a_im))) * inv_s;
    }
  }
  if (mag_.size() < static_cast<size_t>(n) * F) mag_.resize(static_cast<size_t>(n) * F);
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + j * d;
    double* mg = mag_.data() + j * F;
    for (int f = 0; f < F; ++f) {
      const double re = k[f], im = k[f + F];
      mg[f] = std::sqrt(re * re + im * im);
    }
  }
  for (int g = 0; g < group_; ++g) {
    const double* w = w_.data() + static_cast<size_t>(g) * d;
    const double* c = c_.data() + static_cast<size_t>(g) * F;
    double* o = out + static_cast<int64_t>(g) * n;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = keys + j * d;
      const double* mg = mag_.data() + j * F;
      double trig = 0.0, norm = 0.0;
      for (int i = 0; i < d; ++i) trig += w[i] * static_cast<double>(k[i]);
      for (int f = 0; f < F; ++f) norm += c[f] * mg[f];
      o[j] = trig + norm;
    }
  }
}

}  // namespace kvserve::compression
