// Q8_0: 32 elements in 34 bytes, y = d * q.
//
//   offset 0        2                                  34
//          [ d f16 | qs[32] int8, element j = qs[j]    ]
//
// Quantizer: ggml's reference rule (its codes on ordinary inputs): d = amax / 127 in fp32,
// q = round(x / d) half away from zero (computed as x * (1/d)), d stored rounded to nearest
// fp16. So |q| <= 127 and |x - y| <= d/2 + 127 |d - fp16(d)|, i.e.
//   |x - y| <= amax / 225 + 2^-18   (amax = the block's largest |x|; the 2^-18 covers a d in
//                                    fp16's subnormal range, amax < 127 * 2^-14).
// Blocks with amax > 127 * 65504 (fp16 overflow) saturate d at 65504 and clip.
#include <algorithm>
#include <cmath>

#include "quant/blocks/blocks.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 34;
}  // namespace

void DequantizeQ8_0(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = Fp16ToFloat(LoadU16(blocks));
    const auto* qs = reinterpret_cast<const int8_t*>(blocks + 2);
    for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(qs[j]) * d;
  }
}

void QuantizeQ8_0(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(in[j]));
    float d = amax / 127.0f;
    uint16_t dh = FloatToFp16(d);
    if (dh >= 0x7c00u) {  // beyond fp16: saturate and quantize against what is stored
      dh = 0x7bffu;
      d = Fp16ToFloat(dh);
    }
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    StoreU16(blocks, dh);
    auto* qs = reinterpret_cast<int8_t*>(blocks + 2);
    for (int j = 0; j < kBlock; ++j) {
      qs[j] = static_cast<int8_t>(std::clamp(std::round(in[j] * id), -127.0f, 127.0f));
    }
  }
}

}  // namespace kvserve::quant::blocks
