// Q4_1: 32 elements in 20 bytes, y = d * q + m, q in 0..15 (fp32: R(R(q*d) + m), ggml's order).
//
//   offset 0       2       4                                                20
//          [ d f16 | m f16 | qs[16]: low nibble of qs[j] -> element j,       ]
//                                    high nibble       -> element j + 16
//
// Quantizer: ours (legacy_scales.h ChooseMinScale): m = the block's min rounded down to fp16,
// d covers the max, nearest codes, nothing clips:
//   |x - y| <= (max - min) / 29.9 + amax / 16000 + 2^-23   (amax: the largest |x|; the middle
//   term is m's fp16 rounding, visible only in near-constant blocks).
#include "quant/blocks/blocks.h"
#include "quant/blocks/legacy_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 20;
}  // namespace

void DequantizeQ4_1(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const float m = Fp16ToFloat(LoadU16(blocks + 2));
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 4);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>(qs[j] & 15) * d + m;
      out[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

void QuantizeQ4_1(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    const MinChoice c = ChooseMinScale(in, kBlock, 15);
    StoreU16(blocks, c.d);
    StoreU16(blocks + 2, c.m);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 4);
    for (int j = 0; j < 16; ++j) {
      qs[j] =
          static_cast<uint8_t>(MinScaleCode(in[j], c, 15) | (MinScaleCode(in[j + 16], c, 15) << 4));
    }
  }
}

}  // namespace kvserve::quant::blocks
