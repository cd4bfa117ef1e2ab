// Q5_K: 256 elements in 176 bytes; eight sub-blocks of 32, each with a 6-bit scale and min.
//
//   offset 0       2          4            16        48                    176
//          [ d f16 | dmin f16 | scales[12] | qh[32]  | qs[128]              ]
//
//   scales[12]: as Q4_K (q4_k.cc). qs: as Q4_K, chunk c = 0..3 owns qs[32c .. 32c+31], low
//   nibbles -> elements 64c + l, high nibbles -> 64c + 32 + l. The 5th bit: bit 2c of qh[l]
//   for the low-nibble element, bit 2c+1 for the high-nibble one. q in 0..31.
//   y = d1 * q - m1 with d1 = d * sc, m1 = dmin * mn rounded to fp32 (ggml's order; d1*q is
//   exact, so fusing would not change it).
//
// Quantizer: the affine scale search of k_quant_scales.h (q_max 31, 6-bit scales). Per
// sub-block j with range r_j = max(0, max x) - min(0, min x) over its 32 elements:
//   |x - y| <= r_j / 62 + amax / 1250 + 2^-22   (amax over the whole super-block).
#include "quant/blocks/blocks.h"
#include "quant/blocks/k_quant_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBytes = 176;
}  // namespace

void DequantizeQ5_K(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, out += kSuperBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const float dmin = Fp16ToFloat(LoadU16(blocks + 2));
    const auto* scales = reinterpret_cast<const uint8_t*>(blocks + 4);
    const auto* qh = reinterpret_cast<const uint8_t*>(blocks + 16);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 48);
    for (int c = 0; c < 4; ++c) {
      float sc0, mn0, sc1, mn1;
      ScaleMinK4(scales, 2 * c, &sc0, &mn0);
      ScaleMinK4(scales, 2 * c + 1, &sc1, &mn1);
      const float d0 = d * sc0, m0 = dmin * mn0;
      const float d1 = d * sc1, m1 = dmin * mn1;
      const uint8_t* q = qs + 32 * c;
      float* y = out + 64 * c;
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
        y[l] = d0 * static_cast<float>(v) - m0;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
        y[32 + l] = d1 * static_cast<float>(v) - m1;
      }
    }
  }
}

void QuantizeQ5_K(const float* in, std::byte* blocks, int64_t n) {
  AffineSuperBlock sb;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, in += kSuperBlock) {
    QuantizeAffineSuperBlock(in, 8, 63, 31, &sb);
    StoreU16(blocks, sb.d);
    StoreU16(blocks + 2, sb.dmin);
    PackScaleMinK4(sb, reinterpret_cast<uint8_t*>(blocks + 4));
    auto* qh = reinterpret_cast<uint8_t*>(blocks + 16);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 48);
    for (int l = 0; l < 32; ++l) qh[l] = 0;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = sb.q[64 * c + l], hi = sb.q[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

}  // namespace kvserve::quant::blocks
