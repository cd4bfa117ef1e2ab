// Two block types of our own (not ggml's) for Hugging Face integer-quantized checkpoints
// (AWQ, GPTQ, compressed-tensors; model/hf_quant_weights.h transcodes their tensors into
// these rows at load). Each block holds one affine map w = a * code + b in fp32 and unsigned
// codes, so a group with any scale dtype (fp16, bf16, fp32) and any integer zero point is
// represented exactly: a is the scale itself, b = -zero * scale (exact in fp32 for an fp16 or
// bf16 scale and a zero below 2^8: at most 8 + 11 significant bits; fp16 cannot hold it).
//
//   U4_F32: 32 elements in 24 bytes
//     offset 0        4        8                                                   24
//            [ a f32  | b f32  | qs[16]: low nibble of qs[j] -> element j,          ]
//                                        high nibble       -> element j + 16
//   U8_F32: 32 elements in 40 bytes
//            [ a f32  | b f32  | codes[32] u8: element j                            ]
//
// Dequantization: fp32 R(R(a * code) + b) (-ffp-contract=off). The ids (block_type.h) lie
// outside ggml's range: a GGUF file never names them.
//
// Quantizer: ours, min/max affine (a = (max - min) / (2^bits - 1), b = min, nearest code):
//   |x - y| <= a / 2 + a few fp32 ulps of max(|min|, |max|).
#include <algorithm>
#include <cmath>

#include "quant/blocks/blocks.h"

namespace kvserve::quant::blocks {
namespace {

constexpr int kBlock = 32;

float LoadF32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void StoreF32(std::byte* p, float v) { std::memcpy(p, &v, 4); }

// a, b for one block of `levels` - 1 steps, and the nearest code of each element.
void AffineBlock(const float* in, int levels, float& a, float& b, uint8_t* code) {
  float lo = in[0], hi = in[0];
  for (int i = 1; i < kBlock; ++i) {
    lo = std::min(lo, in[i]);
    hi = std::max(hi, in[i]);
  }
  a = (hi - lo) / static_cast<float>(levels - 1);
  b = lo;
  for (int i = 0; i < kBlock; ++i) {
    const float q = a > 0 ? std::nearbyint((in[i] - b) / a) : 0.0f;
    code[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(levels - 1)));
  }
}

}  // namespace

void DequantizeU4_F32(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t k = 0; k < n / kBlock; ++k, blocks += 24, out += kBlock) {
    const float a = LoadF32(blocks), b = LoadF32(blocks + 4);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 8);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>(qs[j] & 15) * a + b;
      out[j + 16] = static_cast<float>(qs[j] >> 4) * a + b;
    }
  }
}

void QuantizeU4_F32(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t k = 0; k < n / kBlock; ++k, blocks += 24, in += kBlock) {
    float a, b;
    uint8_t code[kBlock];
    AffineBlock(in, 16, a, b, code);
    StoreF32(blocks, a);
    StoreF32(blocks + 4, b);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 8);
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(code[j] | code[j + 16] << 4);
  }
}

void DequantizeU8_F32(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t k = 0; k < n / kBlock; ++k, blocks += 40, out += kBlock) {
    const float a = LoadF32(blocks), b = LoadF32(blocks + 4);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 8);
    for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(qs[j]) * a + b;
  }
}

void QuantizeU8_F32(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t k = 0; k < n / kBlock; ++k, blocks += 40, in += kBlock) {
    float a, b;
    AffineBlock(in, 256, a, b, reinterpret_cast<uint8_t*>(blocks + 8));
    StoreF32(blocks, a);
    StoreF32(blocks + 4, b);
  }
}

}  // namespace kvserve::quant::blocks
