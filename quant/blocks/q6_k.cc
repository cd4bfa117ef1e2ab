// Q6_K: 256 elements in 210 bytes; sixteen sub-blocks of 16, each with an int8 scale.
//
//   offset 0          128        192                208       210
//          [ ql[128] | qh[64]   | scales[16] int8  | d f16  ]
//
//   Half h = 0, 1 owns ql[64h ..], qh[32h ..], scales[8h ..]. For l = 0..31:
//     element 128h +      l: (ql[64h+l]    & 15) | ((qh[32h+l] >> 0) & 3) << 4
//     element 128h + 32 + l: (ql[64h+32+l] & 15) | ((qh[32h+l] >> 2) & 3) << 4
//     element 128h + 64 + l: (ql[64h+l]    >> 4) | ((qh[32h+l] >> 4) & 3) << 4
//     element 128h + 96 + l: (ql[64h+32+l] >> 4) | ((qh[32h+l] >> 6) & 3) << 4
//   q = that 6-bit code - 32; element i uses scales[i / 16] (which is scales[8h + l/16 + 2k]
//   for the k-th line above). y = (d * sc) * q, rounded to fp32 after each product (ggml's
//   left-to-right order).
//
// Quantizer: the symmetric scale search of k_quant_scales.h (q in -32..31, scales -128..127).
// Per sub-block j with a_j = max |x| over its 16 elements:
//   |x - y| <= a_j / 62 + amax / 7000 + 2^-24   (amax over the whole super-block).
#include "quant/blocks/blocks.h"
#include "quant/blocks/k_quant_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBytes = 210;
}  // namespace

void DequantizeQ6_K(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, out += kSuperBlock) {
    const auto* ql = reinterpret_cast<const uint8_t*>(blocks);
    const auto* qh = reinterpret_cast<const uint8_t*>(blocks + 128);
    const auto* sc = reinterpret_cast<const int8_t*>(blocks + 192);
    const float d = Fp16ToFloat(LoadU16(blocks + 208));
    for (int h = 0; h < 2; ++h) {
      const uint8_t* l0 = ql + 64 * h;
      const uint8_t* hb = qh + 32 * h;
      float* y = out + 128 * h;
      float ds[8];
      for (int k = 0; k < 8; ++k) ds[k] = d * static_cast<float>(sc[8 * h + k]);
      for (int is = 0; is < 2; ++is) {  // 16 elements per scale: a constant in the inner loop
        const float s0 = ds[is], s1 = ds[is + 2], s2 = ds[is + 4], s3 = ds[is + 6];
        for (int l = 16 * is; l < 16 * is + 16; ++l) {
          const int q0 = ((l0[l] & 15) | (((hb[l] >> 0) & 3) << 4)) - 32;
          const int q1 = ((l0[l + 32] & 15) | (((hb[l] >> 2) & 3) << 4)) - 32;
          const int q2 = ((l0[l] >> 4) | (((hb[l] >> 4) & 3) << 4)) - 32;
          const int q3 = ((l0[l + 32] >> 4) | (((hb[l] >> 6) & 3) << 4)) - 32;
          y[l] = s0 * static_cast<float>(q0);
          y[l + 32] = s1 * static_cast<float>(q1);
          y[l + 64] = s2 * static_cast<float>(q2);
          y[l + 96] = s3 * static_cast<float>(q3);
        }
      }
    }
  }
}

void QuantizeQ6_K(const float* in, std::byte* blocks, int64_t n) {
  SymmetricSuperBlock sb;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, in += kSuperBlock) {
    QuantizeSymmetricSuperBlock(in, 16, 127, 31, &sb);
    auto* ql = reinterpret_cast<uint8_t*>(blocks);
    auto* qh = reinterpret_cast<uint8_t*>(blocks + 128);
    auto* sc = reinterpret_cast<int8_t*>(blocks + 192);
    for (int j = 0; j < 16; ++j) sc[j] = sb.sc[j];
    StoreU16(blocks + 208, sb.d);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        uint8_t c[4];
        for (int k = 0; k < 4; ++k) c[k] = static_cast<uint8_t>(sb.q[128 * h + 32 * k + l] + 32);
        ql[64 * h + l] = static_cast<uint8_t>((c[0] & 15) | ((c[2] & 15) << 4));
        ql[64 * h + 32 + l] = static_cast<uint8_t>((c[1] & 15) | ((c[3] & 15) << 4));
        qh[32 * h + l] = static_cast<uint8_t>((c[0] >> 4) | ((c[1] >> 4) << 2) |
                                              ((c[2] >> 4) << 4) | ((c[3] >> 4) << 6));
      }
    }
  }
}

}  // namespace kvserve::quant::blocks
