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

// The code whose value dl * kIq4Values[code] (fp32) is nearest x; dl == 0 gives code 8.
inline int NearestIq4Code(float x, float dl) {
  if (dl == 0.0f) return 8;
  const float v = x / dl;
  int code = 0;
  for (int i = 0; i < 15; ++i) {
    code += v > 0.5f * static_cast<float>(kIq4Values[i] + kIq4Values[i + 1]) ? 1 : 0;
  }
  return code;
}

struct Iq4Fit {
  float max_err = 0.0f;
  double sse = 0.0;
};

inline Iq4Fit FitIq4(const float* x, int n, float dl) {
  Iq4Fit f;
  for (int i = 0; i < n; ++i) {
    const float y = dl * static_cast<float>(kIq4Values[NearestIq4Code(x[i], dl)]);
    const float e = std::fabs(x[i] - y);
    f.max_err = e > f.max_err ? e : f.max_err;
    f.sse += static_cast<double>(e) * e;
  }
  return f;
}

// True when `cand` is the better choice over `best` given the baseline's largest error.
inline bool BetterIq4(const Iq4Fit& cand, const Iq4Fit& best, float base_max_err) {
  return cand.max_err <= base_max_err && cand.sse < best.sse;
}

}  // namespace kvserve::quant::blocks
