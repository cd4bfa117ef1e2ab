// Q4_K: 256 elements in 144 bytes; eight sub-blocks of 32, each with a 6-bit scale and min.
//
//   offset 0       2          4            16                     144
//          [ d f16 | dmin f16 | scales[12] | qs[128]               ]
//
//   scales[12]: sub-block j's (sc, mn), 6 bits each:
//     j < 4:  sc = scales[j] & 63,                          mn = scales[j+4] & 63
//     j >= 4: sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
//             mn = (scales[j+4] >> 4) | (scales[j]   >> 6) << 4
//   qs: chunk c = 0..3 owns qs[32c .. 32c+31]; low nibble of qs[32c+l] -> element 64c+l
//       (sub-block 2c), high nibble -> element 64c+32+l (sub-block 2c+1).
//   y = d1 * q - m1 with d1 = d * sc and m1 = dmin * mn, each rounded to fp32 in that order
//   (ggml's), q in 0..15. d*sc (11 + 6 significant bits) and d1*q (+ 4 bits) are exact in
//   fp32, so only the final subtraction rounds: the result is the same whether a compiler
//   fuses d1*q - m1 or not (llama.cpp's builds may). Built with -ffp-contract=off anyway.
//
// Quantizer: the affine scale search of k_quant_scales.h (q_max 15, 6-bit scales). Per
// sub-block j with range r_j = max(0, max x) - min(0, min x) over its 32 elements:
//   |x - y| <= r_j / 30 + amax / 600 + 2^-22   (amax over the whole super-block)
// hence |x - y| <= amax / 14.5 + 2^-22 everywhere.
#include "quant/blocks/blocks.h"
#include "quant/blocks/k_quant_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBytes = 144;
}  // namespace

void DequantizeQ4_K(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, out += kSuperBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const float dmin = Fp16ToFloat(LoadU16(blocks + 2));
    const auto* scales = reinterpret_cast<const uint8_t*>(blocks + 4);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 16);
    for (int c = 0; c < 4; ++c) {
      float sc0, mn0, sc1, mn1;
      ScaleMinK4(scales, 2 * c, &sc0, &mn0);
      ScaleMinK4(scales, 2 * c + 1, &sc1, &mn1);
      const float d0 = d * sc0, m0 = dmin * mn0;
      const float d1 = d * sc1, m1 = dmin * mn1;
      const uint8_t* q = qs + 32 * c;
      float* y = out + 64 * c;
      for (int l = 0; l < 32; ++l) y[l] = d0 * static_cast<float>(q[l] & 15) - m0;
      for (int l = 0; l < 32; ++l) y[32 + l] = d1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

void QuantizeQ4_K(const float* in, std::byte* blocks, int64_t n) {
  AffineSuperBlock sb;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, in += kSuperBlock) {
    QuantizeAffineSuperBlock(in, 8, 63, 15, &sb);
    StoreU16(blocks, sb.d);
    StoreU16(blocks + 2, sb.dmin);
    PackScaleMinK4(sb, reinterpret_cast<uint8_t*>(blocks + 4));
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 16);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * c + l] = static_cast<uint8_t>(sb.q[64 * c + l] | (sb.q[64 * c + 32 + l] << 4));
      }
    }
  }
}

}  // namespace kvserve::quant::blocks
