// Q4_0: 32 elements in 18 bytes, y = d * (q - 8), q in 0..15.
//
//   offset 0       2                                               18
//          [ d f16 | qs[16]: low nibble of qs[j] -> element j,      ]
//                            high nibble       -> element j + 16
//
// Quantizer: ggml's reference rule (legacy_scales.h ChooseSymmetric with half 8): the element
// of largest magnitude decodes exactly to itself (code 0, up to fp16 rounding of d), the far
// side clips by at most one step. |x - y| <= amax/8 + 8 |d - fp16(d)|, i.e.
//   |x - y| <= amax / 7.9 + 2^-21.
#include "quant/blocks/blocks.h"
#include "quant/blocks/legacy_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 18;
}  // namespace

void DequantizeQ4_0(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 2);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>((qs[j] & 15) - 8) * d;
      out[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void QuantizeQ4_0(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    const SymmetricChoice c = ChooseSymmetric(in, kBlock, 8);
    StoreU16(blocks, c.d);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 2);
    for (int j = 0; j < 16; ++j) {
      qs[j] = static_cast<uint8_t>(SymmetricCode(in[j], c.id, 8) |
                                   (SymmetricCode(in[j + 16], c.id, 8) << 4));
    }
  }
}

}  // namespace kvserve::quant::blocks
