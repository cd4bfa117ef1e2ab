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

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits
// (the FPU rounds), subtracting restores the value. Inline, unlike nearbyint without SSE4.1;
// the scale searches call it hundreds of times per element.
inline float RoundNearest(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// Nearest code to x * inv (inv = 1 / d1) in the format's range [-(q_max + 1), q_max], as a
// float (the fits below stay in float so that they vectorize).
inline float SymmetricCode(float x, float inv, float q_max) {
  return RoundNearest(std::clamp(x * inv, -(q_max + 1.0f), q_max));
}

struct Fit {
  float max_err = 0.0f;
  float sse = 0.0f;
};

inline Fit Combine(const float* mx, const float* sq) {
  Fit f;
  for (int k = 0; k < 8; ++k) {
    f.max_err = std::max(f.max_err, mx[k]);
    f.sse += sq[k];
  }
  return f;
}

// Errors of one sub-block decoded with the fp32 scale d * sc (y = (d * sc) * q, the format's
// order).
template <int n>
Fit FitSymmetricN(const float* x, float d, int sc, int q_max) {
  const float d1 = d * static_cast<float>(sc);
  const float inv = d1 != 0.0f ? 1.0f / d1 : 0.0f;
  const float fq_max = static_cast<float>(q_max);
  // Eight independent accumulators (a float sum may not be reordered, but lanes may).
  float mx[8] = {}, sq[8] = {};
  for (int i0 = 0; i0 < n; i0 += 8) {
    for (int k = 0; k < 8; ++k) {
      const float e = std::fabs(x[i0 + k] - d1 * SymmetricCode(x[i0 + k], inv, fq_max));
      mx[k] = std::max(mx[k], e);
      sq[k] += e * e;
    }
  }
  return Combine(mx, sq);
}

// Nearest code to (x + m1) * inv (inv = 1 / d1) in [0, q_max], as a float.
inline float AffineCode(float x, float inv, float m1, float q_max) {
  return RoundNearest(std::clamp((x + m1) * inv, 0.0f, q_max));
}

// Errors of one sub-block decoded with d1 = d * sc, m1 = dmin * mn (y = d1 * q - m1, the
// format's fp32 order).
template <int n>
Fit FitAffineN(const float* x, float d, int sc, float dmin, int mn, int q_max) {
  const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
  const float inv = d1 > 0.0f ? 1.0f / d1 : 0.0f;
  const float fq_max = static_cast<float>(q_max);
  float mx[8] = {}, sq[8] = {};
  for (int i0 = 0; i0 < n; i0 += 8) {
    for (int k = 0; k < 8; ++k) {
      const float y = d1 * AffineCode(x[i0 + k], inv, m1, fq_max) - m1;
      const float e = std::fabs(x[i0 + k] - y);
      mx[k] = std::max(mx[k], e);
      sq[k] += e * e;
    }
  }
  return Combine(mx, sq);
}

// The searches try at most about 12 scales per sign across their range: the error changes
// smoothly with the scale, and trying every one costs 2-3x the time for 1-4% less RMS error.
inline int SearchStep(int span) { return std::max(1, (span + 11) / 12); }

// Sub-blocks are 16 or 32 long; a compile-time length lets the fits vectorize whole.
Fit FitSymmetric(const float* x, int n, float d, int sc, int q_max) {
  return n == 16 ? FitSymmetricN<16>(x, d, sc, q_max) : FitSymmetricN<32>(x, d, sc, q_max);
}
Fit FitAffine(const float* x, int n, float d, int sc, float dmin, int mn, int q_max) {
  return n == 16 ? FitAffineN<16>(x, d, sc, dmin, mn, q_max)
                 : FitAffineN<32>(x, d, sc, dmin, mn, q_max);
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
    // Baseline (sc, mn) covers the sub-block; try smaller scales (down to 0.75x) and mins
    // (-2 .. +1) and keep the smallest squared error whose largest error is no worse.
    const float* xs = x + j * sub_len;
    const int mn = out->mn[j];
    Fit best = FitAffine(xs, sub_len, d, sc, dmin, mn, q_max);
    int best_sc = sc, best_mn = mn;
    const float base_max_err = best.max_err;
    const int lo_sc = std::max(1, sc * 3 / 4);
    for (int c = sc; c >= lo_sc; c -= SearchStep(sc - lo_sc)) {
      for (int m = std::max(0, mn - 2); m <= std::min(scale_max, mn + 1); ++m) {
        if (c == sc && m == mn) continue;
        const Fit f = FitAffine(xs, sub_len, d, c, dmin, m, q_max);
        if (f.max_err <= base_max_err && f.sse < best.sse) {
          best = f;
          best_sc = c;
          best_mn = m;
        }
      }
    }
    out->sc[j] = static_cast<uint8_t>(best_sc);
    out->mn[j] = static_cast<uint8_t>(best_mn);
    const float d1 = d * static_cast<float>(best_sc);
    const float m1b = dmin * static_cast<float>(best_mn);
    const float inv = d1 > 0.0f ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < sub_len; ++i) {
      out->q[j * sub_len + i] = static_cast<uint8_t>(AffineCode(xs[i], inv, m1b, fq_max));
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
    Fit best = FitSymmetric(xs, sub_len, d, sc, q_max);
    int best_sc = sc;
    const float base_max_err = best.max_err;
    const int lo_sc = std::max(1, sc * 7 / 10);
    for (int c = sc; c >= lo_sc; c -= SearchStep(sc - lo_sc)) {
      for (int cand : {c, -c}) {
        if (cand == sc) continue;
        const Fit f = FitSymmetric(xs, sub_len, d, cand, q_max);
        if (f.max_err <= base_max_err && f.sse < best.sse) {
          best = f;
          best_sc = cand;
        }
      }
    }
    out->sc[j] = static_cast<int8_t>(best_sc);
    const float d1 = d * static_cast<float>(best_sc);
    const float inv = d1 != 0.0f ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < sub_len; ++i) {
      out->q[j * sub_len + i] = static_cast<int8_t>(SymmetricCode(xs[i], inv, fq_max));
    }
  }
}

}  // namespace kvserve::quant::blocks
