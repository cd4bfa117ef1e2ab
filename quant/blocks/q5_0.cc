// Q5_0: 32 elements in 22 bytes, y = d * (q - 16), q in 0..31.
//
//   offset 0       2                  6                                  22
//          [ d f16 | qh[4] (u32, LE)  | qs[16]                            ]
//   element j < 16:  q = (qs[j] & 15) | (bit j      of qh) << 4
//   element j + 16:  q = (qs[j] >> 4) | (bit j + 16 of qh) << 4
//
// Quantizer: ggml's reference rule (legacy_scales.h ChooseSymmetric with half 16).
//   |x - y| <= amax/16 + 16 |d - fp16(d)|  <=  amax / 15.5 + 2^-20.
#include "quant/blocks/blocks.h"
#include "quant/blocks/legacy_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 22;
}  // namespace

void DequantizeQ5_0(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const uint32_t qh = LoadU32(blocks + 2);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 6);
    uint8_t high[32];  // the 5th bits spread to bytes first: per-lane shifts do not vectorize
    for (int j = 0; j < 32; ++j) high[j] = static_cast<uint8_t>(((qh >> j) & 1u) << 4);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (qs[j] & 15) | high[j];
      const int q1 = (qs[j] >> 4) | high[j + 16];
      out[j] = static_cast<float>(q0 - 16) * d;
      out[j + 16] = static_cast<float>(q1 - 16) * d;
    }
  }
}

void QuantizeQ5_0(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    const SymmetricChoice c = ChooseSymmetric(in, kBlock, 16);
    StoreU16(blocks, c.d);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 6);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = SymmetricCode(in[j], c.id, 16);
      const int q1 = SymmetricCode(in[j + 16], c.id, 16);
      qs[j] = static_cast<uint8_t>((q0 & 15) | ((q1 & 15) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    StoreU32(blocks + 2, qh);
  }
}

}  // namespace kvserve::quant::blocks
