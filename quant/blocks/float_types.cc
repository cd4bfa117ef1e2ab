// The unquantized types, one element per "block": F32 (4 bytes, IEEE binary32), F16 (2 bytes,
// IEEE binary16) and BF16 (2 bytes, the top half of a binary32). Dequantizing widens exactly;
// "quantizing" narrows with round-to-nearest-even (F16: |x| >= 65520 becomes +-inf, the only
// case not within half an fp16 ulp of x).
#include <cstring>

#include "quant/blocks/blocks.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {

void DequantizeF32(const std::byte* blocks, float* __restrict out, int64_t n) {
  std::memcpy(out, blocks, static_cast<size_t>(n) * sizeof(float));
}
void QuantizeF32(const float* in, std::byte* blocks, int64_t n) {
  std::memcpy(blocks, in, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(LoadU16(blocks + 2 * i));
}
void QuantizeF16(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t i = 0; i < n; ++i) StoreU16(blocks + 2 * i, FloatToFp16(in[i]));
}

void DequantizeBF16(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(LoadU16(blocks + 2 * i));
}
void QuantizeBF16(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t i = 0; i < n; ++i) StoreU16(blocks + 2 * i, FloatToBf16(in[i]));
}

}  // namespace kvserve::quant::blocks
