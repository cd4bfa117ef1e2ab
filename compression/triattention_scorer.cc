#include "compression/triattention_scorer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "base/check.h"

namespace kvserve::compression {

int NumOffsetsFor(int64_t max_offset) {
  if (max_offset <= 0) return kTriAttentionNumOffsets;
  int m = 1;
  while (m < 62 && (int64_t{1} << m) <= max_offset) ++m;
  return m;
}

TriAttentionScorer::TriAttentionScorer(const TriAttentionStats& stats, std::span<const float> inv_freq,
                                       const TriScorerOptions& options)
    : stats_(stats),
      inv_freq_(inv_freq.begin(), inv_freq.end()),
      options_(options),
      freqs_(stats.num_freqs()),
      head_dim_(stats.head_dim),
      group_(stats.num_q_heads / stats.num_kv_heads),
      c_re_(static_cast<size_t>(freqs_)),
      c_im_(static_cast<size_t>(freqs_)),
      o_re_(static_cast<size_t>(options.num_offsets) * freqs_),
      o_im_(static_cast<size_t>(options.num_offsets) * freqs_),
      w_(static_cast<size_t>(options.offset_pool == TriOffsetPool::kMax ? options.num_offsets : 1) * group_ *
         head_dim_),
      c_(static_cast<size_t>(group_) * freqs_) {
  KVS_CHECK(inv_freq_.empty() || static_cast<int>(inv_freq_.size()) == freqs_, "RoPE table of ", inv_freq_.size(), " for ", freqs_,
            " frequency pairs");
  KVS_CHECK(options.num_offsets >= 1 && options.num_offsets < 63);
}

TriAttentionScorer::TriAttentionScorer(const TriAttentionStats& stats)
    : TriAttentionScorer(stats, {}, TriScorerOptions{}) {}

void TriAttentionScorer::Prepare(int64_t next_position) {
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  const int M = options_.num_offsets;
  for (int f = 0; f < freqs_; ++f) {
    const double omega = inv_freq_.empty() ? stats_.inv_freq[static_cast<size_t>(f)] : inv_freq_[static_cast<size_t>(f)];
    double re = 0.0, im = 0.0;
    for (int m = 0; m < M; ++m) {
      const double tau = static_cast<double>(next_position + (int64_t{1} << m));
      const double phase = std::fmod(tau * omega, kTwoPi);
      const double cr = std::cos(phase), ci = std::sin(phase);
      o_re_[static_cast<size_t>(m) * freqs_ + f] = cr;
      o_im_[static_cast<size_t>(m) * freqs_ + f] = ci;
      re += cr;
      im += ci;
    }
    c_re_[static_cast<size_t>(f)] = re / M;
    c_im_[static_cast<size_t>(f)] = im / M;
  }
}

void TriAttentionScorer::ScoreKvHead(int layer, int kv_head, const float* keys, int64_t n, double* out) {
  PrepareKvHead(layer, kv_head);
  ScoreKeys(keys, n, out);
}

TriKeyWeights TriAttentionScorer::PrepareKvHead(int layer, int kv_head) {
  const int F = freqs_;
  const int d = head_dim_;
  const double s = stats_.attention_scaling;
  const double s2 = s * s;
  const double inv_s = 1.0 / s;  // cached keys carry s once; kappa = cached / s
  const bool max_pool = options_.offset_pool == TriOffsetPool::kMax;
  const int P = max_pool ? options_.num_offsets : 1;
  for (int g = 0; g < group_; ++g) {
    const int h = kv_head * group_ + g;
    double* c = c_.data() + static_cast<size_t>(g) * F;
    for (int p = 0; p < P; ++p) {
      const double* cre = max_pool ? o_re_.data() + static_cast<size_t>(p) * F : c_re_.data();
      const double* cim = max_pool ? o_im_.data() + static_cast<size_t>(p) * F : c_im_.data();
      double* w = w_.data() + (static_cast<size_t>(p) * group_ + g) * d;
      for (int f = 0; f < F; ++f) {
        const FreqStat& st = stats_.at(layer, h, f);
        const double cr = cre[f], ci = cim[f];
        // u = s^2 * A * C; folding 1/s in here scores the cached keys directly.
        w[f] = s2 * (st.a_re * cr - st.a_im * ci) * inv_s;
        w[f + F] = s2 * (st.a_re * ci + st.a_im * cr) * inv_s;
      }
    }
    for (int f = 0; f < F; ++f) {
      const FreqStat& st = stats_.at(layer, h, f);
      c[f] = std::max(0.0, s2 * (st.m - std::hypot(st.a_re, st.a_im))) * inv_s;
    }
  }
  TriKeyWeights wt;
  wt.group = group_;
  wt.pools = P;
  wt.trig = options_.terms != TriScoreTerms::kNormOnly;
  wt.norm = options_.terms != TriScoreTerms::kTrigOnly;
  wt.w = std::span<const double>(w_.data(), static_cast<size_t>(P) * group_ * d);
  wt.c = std::span<const double>(c_.data(), static_cast<size_t>(group_) * F);
  return wt;
}

void TriAttentionScorer::ScoreKeys(const float* keys, int64_t n, double* out) {
  const int F = freqs_;
  const int d = head_dim_;
  const bool max_pool = options_.offset_pool == TriOffsetPool::kMax;
  const int P = max_pool ? options_.num_offsets : 1;
  const bool want_trig = options_.terms != TriScoreTerms::kNormOnly;
  const bool want_norm = options_.terms != TriScoreTerms::kTrigOnly;
  if (want_norm) {
    if (mag_.size() < static_cast<size_t>(n) * F) mag_.resize(static_cast<size_t>(n) * F);
    for (int64_t j = 0; j < n; ++j) {
      const float* k = keys + j * d;
      double* mg = mag_.data() + j * F;
      for (int f = 0; f < F; ++f) {
        const double re = k[f], im = k[f + F];
        mg[f] = std::sqrt(re * re + im * im);
      }
    }
  }
  for (int g = 0; g < group_; ++g) {
    const double* c = c_.data() + static_cast<size_t>(g) * F;
    double* o = out + static_cast<int64_t>(g) * n;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = keys + j * d;
      double trig = 0.0, norm = 0.0;
      if (want_trig) {
        trig = -std::numeric_limits<double>::infinity();
        for (int p = 0; p < P; ++p) {
          const double* w = w_.data() + (static_cast<size_t>(p) * group_ + g) * d;
          double t = 0.0;
          for (int i = 0; i < d; ++i) t += w[i] * static_cast<double>(k[i]);
          trig = std::max(trig, t);
        }
      }
      if (want_norm) {
        const double* mg = mag_.data() + j * F;
        for (int f = 0; f < F; ++f) norm += c[f] * mg[f];
      }
      o[j] = trig + norm;
    }
  }
}

}  // namespace kvserve::compression
