// IQ4_XS: 256 elements in 136 bytes; eight sub-blocks of 32, each with a signed 6-bit scale,
// values from the IQ4_NL codebook (iq4_codebook.h).
//
//   offset 0       2              4            8                      136
//          [ d f16 | scales_h u16 | scales_l[4] | qs[128]              ]
//
//   Sub-block ib = 0..7: ls = ((scales_l[ib/2] >> 4*(ib%2)) & 15) | ((scales_h >> 2*ib) & 3) << 4,
//   dl = d * (ls - 32) rounded to fp32; qs[16ib + j] low nibble -> element 32ib + j, high
//   nibble -> element 32ib + 16 + j; y = dl * kIq4Values[nibble] rounded to fp32.
//
// Quantizer: ours. d = max_ib a_ib / (127 * 31) rounded up to fp16 (a_ib = max |x| of the
// sub-block). Per sub-block the baseline ls - 32 = +-(smallest L with d*L*127 >= a_ib),
// signed so the extreme maps to -127; then the codebook search of iq4_codebook.h over the
// integer scales nearest a_ib / divisor, both signs. Never worse than the baseline:
//   |x - y| <= a_ib / 9 + amax / 280 + 2^-20   (amax over the whole super-block).
#include <algorithm>
#include <cmath>

#include "quant/blocks/blocks.h"
#include "quant/blocks/iq4_codebook.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 256;
constexpr int kBytes = 136;
}  // namespace

void DequantizeIQ4_XS(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const uint16_t scales_h = LoadU16(blocks + 2);
    const auto* scales_l = reinterpret_cast<const uint8_t*>(blocks + 4);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 8);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls =
          ((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = qs + 16 * ib;
      float* y = out + 32 * ib;
      float v[16];  // the 16 possible outputs (the same fp32 products), then a plain lookup
      for (int k = 0; k < 16; ++k) v[k] = dl * static_cast<float>(kIq4Values[k]);
      for (int j = 0; j < 16; ++j) {
        y[j] = v[q[j] & 15];
        y[j + 16] = v[q[j] >> 4];
      }
    }
  }
}

void QuantizeIQ4_XS(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    float amax[8], max[8];
    float top = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      amax[ib] = 0.0f;
      max[ib] = 0.0f;
      for (int j = 0; j < 32; ++j) {
        const float v = in[32 * ib + j];
        if (std::fabs(v) > amax[ib]) {
          amax[ib] = std::fabs(v);
          max[ib] = v;
        }
      }
      top = std::max(top, amax[ib]);
    }
    const uint16_t dh = Fp16RoundUp(top / 127.0f / 31.0f);
    const float d = Fp16ToFloat(dh);
    uint16_t scales_h = 0;
    uint8_t scales_l[4] = {};
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 8);
    for (int ib = 0; ib < 8; ++ib) {
      const float* x = in + 32 * ib;
      int best_l = 0;
      if (d > 0.0f && amax[ib] > 0.0f) {
        // Clamped as floats first: a saturated d can leave the quotients beyond int's range.
        int big_l = static_cast<int>(std::clamp(std::ceil(amax[ib] / 127.0f / d), 1.0f, 31.0f));
        while (big_l < 31 && d * static_cast<float>(big_l) * 127.0f < amax[ib]) ++big_l;
        best_l = max[ib] > 0.0f ? -big_l : big_l;
      }
      Iq4Fit best = FitIq4(x, d * static_cast<float>(best_l));
      const float base_max_err = best.max_err;
      if (best_l != 0) {
        for (float divisor : kIq4Divisors) {
          const int mag = static_cast<int>(std::min(std::nearbyint(amax[ib] / divisor / d), 32.0f));
          for (int l : {std::min(mag, 31), -std::min(mag, 32)}) {
            if (l == 0) continue;
            const Iq4Fit f = FitIq4(x, d * static_cast<float>(l));
            if (BetterIq4(f, best, base_max_err)) {
              best = f;
              best_l = l;
            }
          }
        }
      }
      const int ls = best_l + 32;
      scales_l[ib / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (ib % 2)));
      scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
      const float inv = Iq4Inverse(d * static_cast<float>(best_l));
      for (int j = 0; j < 16; ++j) {
        qs[16 * ib + j] = static_cast<uint8_t>(NearestIq4Code(x[j] * inv) |
                                               (NearestIq4Code(x[j + 16] * inv) << 4));
      }
    }
    StoreU16(blocks, dh);
    StoreU16(blocks + 2, scales_h);
    for (int k = 0; k < 4; ++k) reinterpret_cast<uint8_t*>(blocks + 4)[k] = scales_l[k];
  }
}

}  // namespace kvserve::quant::blocks
