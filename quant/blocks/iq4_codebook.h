// Internal: the IQ4_NL / IQ4_XS codebook (ggml's kvalues_iq4nl, a non-uniform 4-bit grid
// denser near 0) and the scale search shared by their quantizers.
//
//   code:  0    1    2    3    4    5    6    7   8   9  10  11  12  13  14   15
//   value: -127 -104 -83  -65  -49  -35  -22  -10 1   13  25  38  53  69  89   113
//
// Largest gap 24 (89..113), so inside [-127, 113] * |dl| the nearest code is within 12 |dl|;
// with the scale's sign chosen so the block's extreme maps to -127, the other side reaches
// at most 127 |dl| and is within 14 |dl|. Hence a "baseline" scale |dl| >= amax / 127 bounds
// the error by 14 |dl|. The search tries a few other scales (other divisors, both signs) and
// keeps the one with the smallest squared error among those whose largest error does not
// exceed the baseline's: better fits on typical data, never a worse bound.
#pragma once

#include <cmath>
#include <cstdint>

namespace kvserve::quant::blocks {

inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Divisors tried besides the baseline (amax / divisor is the candidate |scale|).
inline constexpr float kIq4Divisors[] = {127, 124, 121, 118, 115, 113, 110, 106, 102, 98};

// The code whose value is nearest v = x / dl: the number of midpoints between neighbouring
// values below v (ties to the lower code). Callers pass x * (1 / dl); dl == 0 takes v = 0,
// code 8 (value 1, decoding to 0).
inline int NearestIq4Code(float v) {
  int code = 0;
  for (int i = 0; i < 15; ++i) {
    code += v > 0.5f * static_cast<float>(kIq4Values[i] + kIq4Values[i + 1]) ? 1 : 0;
  }
  return code;
}

// kIq4Values[NearestIq4Code(v)] as a float, built from compares and adds (no table lookup)
// so that the fit below vectorizes.
inline float NearestIq4Value(float v) {
  float value = static_cast<float>(kIq4Values[0]);
  for (int i = 0; i < 15; ++i) {
    const float gap = static_cast<float>(kIq4Values[i + 1] - kIq4Values[i]);
    value += v > 0.5f * static_cast<float>(kIq4Values[i] + kIq4Values[i + 1]) ? gap : 0.0f;
  }
  return value;
}

inline float Iq4Inverse(float dl) { return dl != 0.0f ? 1.0f / dl : 0.0f; }

struct Iq4Fit {
  float max_err = 0.0f;
  float sse = 0.0f;
};

// Errors of 32 elements decoded with scale dl (y = dl * value, fp32). Eight independent
// accumulators: a float sum may not be reordered, but lanes may.
inline Iq4Fit FitIq4(const float* x, float dl) {
  const float inv = Iq4Inverse(dl);
  float mx[8] = {}, sq[8] = {};
  for (int i0 = 0; i0 < 32; i0 += 8) {
    for (int k = 0; k < 8; ++k) {
      const float e = std::fabs(x[i0 + k] - dl * NearestIq4Value(x[i0 + k] * inv));
      mx[k] = e > mx[k] ? e : mx[k];
      sq[k] += e * e;
    }
  }
  Iq4Fit f;
  for (int k = 0; k < 8; ++k) {
    f.max_err = mx[k] > f.max_err ? mx[k] : f.max_err;
    f.sse += sq[k];
  }
  return f;
}

// True when `cand` is the better choice over `best` given the baseline's largest error.
inline bool BetterIq4(const Iq4Fit& cand, const Iq4Fit& best, float base_max_err) {
  return cand.max_err <= base_max_err && cand.sse < best.sse;
}

}  // namespace kvserve::quant::blocks
