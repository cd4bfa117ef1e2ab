// Internal: the scale choices of the 32-element "legacy" quantizers (Q4_0/Q5_0 symmetric,
// Q4_1/Q5_1 with a min), shared by each pair.
//
// Symmetric, ggml's reference rule (so its codes on ordinary inputs): d = max / -half where
// `max` is the signed value of largest magnitude (the first one on ties), so that element
// lands on code 0 (= -half); q = min(2*half - 1, trunc(x / d + half + 0.5)). The far side
// clips at code 2*half - 1 (at most one step).
//
// With a min: y = d*q + m. m = the block's min rounded DOWN to fp16, d = (max - m) / q_max
// rounded UP to fp16 and bumped until d*q_max + m >= max (fp32, ggml's order), so nothing
// clips: |x - y| <= d/2 (+ fp32 ulps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "quant/fp16.h"

namespace kvserve::quant::blocks {

struct SymmetricChoice {
  uint16_t d;  // fp16 bits to store
  float id;    // 1/d in fp32 (of the unrounded d, as ggml), 0 when d is 0
};

inline SymmetricChoice ChooseSymmetric(const float* x, int n, int half) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  float d = max / static_cast<float>(-half);
  uint16_t dh = FloatToFp16(d);
  if ((dh & 0x7fffu) >= 0x7c00u) {  // beyond fp16: saturate, quantize against what is stored
    dh = static_cast<uint16_t>((dh & 0x8000u) | 0x7bffu);
    d = Fp16ToFloat(dh);
  }
  return {dh, d != 0.0f ? 1.0f / d : 0.0f};
}

// Code for x under ChooseSymmetric's id: in [0, 2*half - 1].
inline int SymmetricCode(float x, float id, int half) {
  const float v = x * id + (static_cast<float>(half) + 0.5f);
  // Truncation (v >= 0 in range); clamped as a float first for blocks beyond fp16's range.
  return static_cast<int>(std::clamp(v, 0.0f, static_cast<float>(2 * half - 1)));
}

struct MinChoice {
  uint16_t d, m;  // fp16 bits to store
  float df, mf;   // their values
};

inline MinChoice ChooseMinScale(const float* x, int n, int q_max) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < n; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  MinChoice c;
  c.m = Fp16RoundDown(lo);
  c.mf = Fp16ToFloat(c.m);
  const float fq = static_cast<float>(q_max);
  c.d = Fp16RoundUp((hi - c.mf) / fq);
  c.df = Fp16ToFloat(c.d);
  while (c.d < 0x7bffu && c.df * fq + c.mf < hi) {
    c.d = Fp16NextUp(c.d);
    c.df = Fp16ToFloat(c.d);
  }
  return c;
}

// Code for x under ChooseMinScale: nearest to (x - m) / d, in [0, q_max].
inline int MinScaleCode(float x, const MinChoice& c, int q_max) {
  if (c.df == 0.0f) return 0;
  const float v = std::nearbyint((x - c.mf) / c.df);
  return static_cast<int>(std::clamp(v, 0.0f, static_cast<float>(q_max)));
}

}  // namespace kvserve::quant::blocks
