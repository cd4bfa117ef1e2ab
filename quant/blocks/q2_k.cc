// Q2_K: 256 elements in 84 bytes; sixteen sub-blocks of 16, each with a 4-bit scale and min.
//
//   offset 0            16        80      82          84
//          [ scales[16] | qs[64]  | d f16 | dmin f16  ]
//
//   scales[i]: low nibble = sc, high nibble = mn of sub-block i (elements 16i .. 16i+15).
//   qs: half n = 0, 1 owns qs[32n .. 32n+31]; element 128n + 32j + s (j = 0..3, s = 0..31)
//       is bits 2j, 2j+1 of qs[32n + s]. q in 0..3.
//   y = dl * q - ml with dl = d * sc, ml = dmin * mn, each rounded to fp32 (ggml's order).
//
// Quantizer: the affine scale search of k_quant_scales.h (q_max 3, 4-bit scales). Per
// sub-block i with range r_i = max(0, max x) - min(0, min x) over its 16 elements:
//   |x - y| <= r_i / 6 + amax / 29 + 2^-22   (amax over the whole super-block).
#include "quant/blocks/blocks.h"
#include "quant/blocks/k_quant_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBytes = 84;
}  // namespace

void DequantizeQ2_K(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, out += kSuperBlock) {
    const auto* scales = reinterpret_cast<const uint8_t*>(blocks);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 16);
    const float d = Fp16ToFloat(LoadU16(blocks + 80));
    const float dmin = Fp16ToFloat(LoadU16(blocks + 82));
    for (int i = 0; i < 16; ++i) {  // sub-block i: half i / 8, shift 2 * ((i % 8) / 2)
      const float dl = d * static_cast<float>(scales[i] & 15);
      const float ml = dmin * static_cast<float>(scales[i] >> 4);
      const uint8_t* q = qs + 32 * (i / 8) + 16 * (i % 2);
      const int shift = 2 * ((i % 8) / 2);
      float* y = out + 16 * i;
      for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

void QuantizeQ2_K(const float* in, std::byte* blocks, int64_t n) {
  AffineSuperBlock sb;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, in += kSuperBlock) {
    QuantizeAffineSuperBlock(in, 16, 15, 3, &sb);
    auto* scales = reinterpret_cast<uint8_t*>(blocks);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 16);
    for (int i = 0; i < 16; ++i) scales[i] = static_cast<uint8_t>(sb.sc[i] | (sb.mn[i] << 4));
    for (int k = 0; k < 64; ++k) qs[k] = 0;
    for (int e = 0; e < kSuperBlock; ++e) {
      qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(sb.q[e] << (2 * ((e % 128) / 32)));
    }
    StoreU16(blocks + 80, sb.d);
    StoreU16(blocks + 82, sb.dmin);
  }
}

}  // namespace kvserve::quant::blocks
