// Q5_1: 32 elements in 24 bytes, y = d * q + m, q in 0..31 (fp32: R(R(q*d) + m), ggml's order).
//
//   offset 0       2       4                  8                           24
//          [ d f16 | m f16 | qh[4] (u32, LE)  | qs[16]                     ]
//   element j < 16:  q = (qs[j] & 15) | (bit j      of qh) << 4
//   element j + 16:  q = (qs[j] >> 4) | (bit j + 16 of qh) << 4
//
// Quantizer: ours (legacy_scales.h ChooseMinScale), nothing clips:
//   |x - y| <= (max - min) / 61.8 + amax / 32000 + 2^-23   (amax: the largest |x|).
#include "quant/blocks/blocks.h"
#include "quant/blocks/legacy_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 24;
}  // namespace

void DequantizeQ5_1(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const float m = Fp16ToFloat(LoadU16(blocks + 2));
    const uint32_t qh = LoadU32(blocks + 4);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 8);
    uint8_t high[32];  // the 5th bits spread to bytes first: per-lane shifts do not vectorize
    for (int j = 0; j < 32; ++j) high[j] = static_cast<uint8_t>(((qh >> j) & 1u) << 4);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (qs[j] & 15) | high[j];
      const int q1 = (qs[j] >> 4) | high[j + 16];
      out[j] = static_cast<float>(q0) * d + m;
      out[j + 16] = static_cast<float>(q1) * d + m;
    }
  }
}

void QuantizeQ5_1(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    const MinChoice c = ChooseMinScale(in, kBlock, 31);
    StoreU16(blocks, c.d);
    StoreU16(blocks + 2, c.m);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 8);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = MinScaleCode(in[j], c, 31);
      const int q1 = MinScaleCode(in[j + 16], c, 31);
      qs[j] = static_cast<uint8_t>((q0 & 15) | ((q1 & 15) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    StoreU32(blocks + 4, qh);
  }
}

}  // namespace kvserve::quant::blocks
