// IQ4_NL: 32 elements in 18 bytes, y = d * kIq4Values[q] (iq4_codebook.h), rounded to fp32.
//
//   offset 0       2                                              18
//          [ d f16 | qs[16]: low nibble of qs[j] -> element j,     ]
//                            high nibble       -> element j + 16
//
// Quantizer: ours. Baseline d = amax / 127 rounded up to fp16, signed so that the extreme
// element maps to code 0 (-127); then the codebook search of iq4_codebook.h over fp16 scales
// amax / divisor of both signs, nearest codes. Never worse than the baseline:
//   |x - y| <= 14 |d_base| <= amax / 9 + 2^-20.
#include <algorithm>
#include <cmath>

#include "quant/blocks/blocks.h"
#include "quant/blocks/iq4_codebook.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 18;
}  // namespace

void DequantizeIQ4_NL(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 2);
    // The 16 possible outputs first (the same fp32 products), then a plain lookup.
    float v[16];
    for (int k = 0; k < 16; ++k) v[k] = d * static_cast<float>(kIq4Values[k]);
    for (int j = 0; j < 16; ++j) {
      out[j] = v[qs[j] & 15];
      out[j + 16] = v[qs[j] >> 4];
    }
  }
}

void QuantizeIQ4_NL(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      if (std::fabs(in[j]) > amax) {
        amax = std::fabs(in[j]);
        max = in[j];
      }
    }
    // Baseline: |d| >= amax / 127, extreme -> -127.
    uint16_t best_h = Fp16RoundUp(amax / 127.0f);
    if (max > 0.0f) best_h = static_cast<uint16_t>(best_h | 0x8000u);
    Iq4Fit best = FitIq4(in, Fp16ToFloat(best_h));
    const float base_max_err = best.max_err;
    if (amax > 0.0f) {
      for (float divisor : kIq4Divisors) {
        const uint16_t h = FloatToFp16(amax / divisor);
        if ((h & 0x7fffu) >= 0x7c00u) continue;
        for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
          const uint16_t cand_h = static_cast<uint16_t>(h | sign);
          const Iq4Fit f = FitIq4(in, Fp16ToFloat(cand_h));
          if (BetterIq4(f, best, base_max_err)) {
            best = f;
            best_h = cand_h;
          }
        }
      }
    }
    StoreU16(blocks, best_h);
    const float inv = Iq4Inverse(Fp16ToFloat(best_h));
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 2);
    for (int j = 0; j < 16; ++j) {
      qs[j] = static_cast<uint8_t>(NearestIq4Code(in[j] * inv) |
                                   (NearestIq4Code(in[j + 16] * inv) << 4));
    }
  }
}

}  // namespace kvserve::quant::blocks
