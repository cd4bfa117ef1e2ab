// The K-quant scale search (see k_quant_scales.h for the method and its bound).
#include "quant/blocks/k_quant_scales.h"

#include <algorithm>
#include <cmath>

#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {

// Smallest code c in [0, max_code] with covered(c); max_code if none. `guess` is a ceil of the
// exact quotient, so at most a step or two of fp32 rounding separates it from the answer.
template <typename Covered>
int SmallestCovering(float guess, int max_code, Covered covered) {
  // Clamped as a float first: a saturated fp16 scale can leave `guess` beyond int's range.
  int c = static_cast<int>(std::clamp(std::ceil(guess), 0.0f, static_cast<float>(max_code)));
  while (c > 0 && covered(c - 1)) --c;
  while (c < max_code && !covered(c)) ++c;
  return c;
}

// Nearest code to x * inv (inv = 1 / d1) in the format's range [-(q_max + 1), q_max].
inline int8_t SymmetricCode(float x, float inv, int q_max) {
  const float v = std::nearbyint(x * inv);
  return static_cast<int8_t>(
      std::clamp(v, -static_cast<float>(q_max + 1), static_cast<float>(q_max)));
}

struct SymmetricFit {
  float max_err = 0.0f;
  float sse = 0.0f;
};

// Errors of one sub-block decoded with the fp32 scale d * sc (y = (d * sc) * q, the format's
// order).
SymmetricFit FitSymmetric(const float* x, int n, float d, int sc, int q_max) {
  const float d1 = d * static_cast<float>(sc);
  const float inv = d1 != 0.0f ? 1.0f / d1 : 0.0f;
  SymmetricFit f;
  for (int i = 0; i < n; ++i) {
    const float e = std::fabs(x[i] - d1 * static_cast<float>(SymmetricCode(x[i], inv, q_max)));
    f.max_err = std::max(f.max_err, e);
    f.sse += e * e;
  }
  return f;
}

}  // namespace

void QuantizeAffineSuperBlock(const float* x, int sub_count, int scale_max, int q_max,
                              AffineSuperBlock* out) {
  const int sub_len = kSuperBlock / sub_count;
  float lo[16], hi[16];
  float max_m = 0.0f;
  for (int j = 0; j < sub_count; ++j) {
    float a = 0.0f, b = x[j * sub_len];
    for (int i = 0; i < sub_len; ++i) {
      a = std::min(a, x[j * sub_len + i]);
      b = std::max(b, x[j * sub_len + i]);
    }
    lo[j] = a;
    hi[j] = std::max(a, b);
    max_m = std::max(max_m, -a);
  }
  out->dmin = Fp16RoundUp(max_m / static_cast<float>(scale_max));
  const float dmin = Fp16ToFloat(out->dmin);
  float m1[16], need[16];
  float max_need = 0.0f;
  for (int j = 0; j < sub_count; ++j) {
    const int mn = dmin > 0.0f ? SmallestCovering(
                                     -lo[j] / dmin, scale_max,
                                     [&](int c) { return dmin * static_cast<float>(c) >= -lo[j]; })
                               : 0;
    out->mn[j] = static_cast<uint8_t>(mn);
    m1[j] = dmin * static_cast<float>(mn);
    need[j] = (hi[j] + m1[j]) / static_cast<float>(q_max);
    max_need = std::max(max_need, need[j]);
  }
  out->d = Fp16RoundUp(max_need / static_cast<float>(scale_max));
  const float d = Fp16ToFloat(out->d);
  const float fq_max = static_cast<float>(q_max);
  for (int j = 0; j < sub_count; ++j) {
    const int sc = d > 0.0f ? SmallestCovering(need[j] / d, scale_max,
                                               [&](int c) {
                                                 const float d1 = d * static_cast<float>(c);
                                                 return d1 * fq_max - m1[j] >= hi[j];
                                               })
                            : 0;
    out->sc[j] = static_cast<uint8_t>(sc);
    const float d1 = d * static_cast<float>(sc);
    const float inv = d1 > 0.0f ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < sub_len; ++i) {
      const float v = std::nearbyint((x[j * sub_len + i] + m1[j]) * inv);
      out->q[j * sub_len + i] = static_cast<uint8_t>(std::clamp(v, 0.0f, fq_max));
    }
  }
}

void QuantizeSymmetricSuperBlock(const float* x, int sub_count, int scale_max, int q_max,
                                 SymmetricSuperBlock* out) {
  const int sub_len = kSuperBlock / sub_count;
  const float fq_max = static_cast<float>(q_max);
  float amax[16];
  float max_s = 0.0f;
  for (int j = 0; j < sub_count; ++j) {
    float a = 0.0f;
    for (int i = 0; i < sub_len; ++i) a = std::max(a, std::fabs(x[j * sub_len + i]));
    amax[j] = a;
    max_s = std::max(max_s, a / fq_max);
  }
  out->d = Fp16RoundUp(max_s / static_cast<float>(scale_max));
  const float d = Fp16ToFloat(out->d);
  for (int j = 0; j < sub_count; ++j) {
    const int sc = d > 0.0f ? SmallestCovering(amax[j] / fq_max / d, scale_max,
                                               [&](int c) {
                                                 const float d1 = d * static_cast<float>(c);
                                                 return d1 * fq_max >= amax[j];
                                               })
                            : 0;
    // Baseline sc covers the sub-block with codes in [-q_max, q_max]; try the integer scales
    // from 0.7x to 1x of it (both signs: the format's extra code -(q_max + 1) makes the two
    // sides differ) and keep the smallest squared error whose largest error is no worse.
    const float* xs = x + j * sub_len;
    SymmetricFit best = FitSymmetric(xs, sub_len, d, sc, q_max);
    int best_sc = sc;
    const float base_max_err = best.max_err;
    for (int c = std::max(1, sc * 7 / 10); c <= sc; ++c) {
      for (int cand : {c, -c}) {
        if (cand == sc) continue;
        const SymmetricFit f = FitSymmetric(xs, sub_len, d, cand, q_max);
        if (f.max_err <= base_max_err && f.sse < best.sse) {
          best = f;
          best_sc = cand;
        }
      }
    }
    out->sc[j] = static_cast<int8_t>(best_sc);
    const float d1 = d * static_cast<float>(best_sc);
    const float inv = d1 != 0.0f ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < sub_len; ++i) out->q[j * sub_len + i] = SymmetricCode(xs[i], inv, q_max);
  }
}

}  // namespace kvserve::quant::blocks
