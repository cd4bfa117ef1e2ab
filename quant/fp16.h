// Scalar conversions between binary32 and the 16-bit formats the block types store: IEEE
// binary16 (ggml's `ggml_fp16_t`: every scale d/dmin/m) and bfloat16 (BF16 tensors).
//
//   binary16: [ sign 1 | exponent 5 (bias 15) | mantissa 10 ]   subnormals: m * 2^-24
//   bfloat16: [ sign 1 | exponent 8 (bias 127) | mantissa 7 ]   = the top half of a binary32
//
// Widening is exact (every binary16 and bfloat16 value is a binary32 value). Narrowing rounds
// to nearest, ties to even. kernels/cpu/kv_quant.h has its own copies for the KV cache; these
// live here because quant/ sits below kernels/ (the quantized kernels depend on this library).
#pragma once

#include <bit>
#include <cstdint>

namespace kvserve::quant {

inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  // The 15 magnitude bits placed at a binary32's exponent/mantissa read as 2^-112 times the
  // value (normals and subnormals alike, subnormals as binary32 denormals); scaling by 2^112
  // is exact. inf/NaN (exponent all ones) keep their payload under an all-ones exponent. A
  // mask rather than a branch, so that row loops over it vectorize.
  const uint32_t finite = std::bit_cast<uint32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13);
  // All ones when em >= 0x7c00 (em < 2^15, so the sign of the difference says it).
  const uint32_t mask = static_cast<uint32_t>(static_cast<int32_t>(0x7bffu - em) >> 31);
  return std::bit_cast<float>((finite & ~mask) | (special & mask) | sign);
}

// Round to nearest even; |x| >= 65520 gives +-inf, NaN a quiet NaN.
inline uint16_t FloatToFp16(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  f &= 0x7fffffffu;
  if (f > 0x7f800000u) return sign | 0x7e00u;
  if (f >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to inf
  if (f < 0x38800000u) {
    // Below 2^-14 (binary16 subnormal or zero): 0.5f has an ulp of 2^-24, the binary16
    // subnormal step, so the FPU's own RNE addition rounds; the low bits are then the code.
    const float v = std::bit_cast<float>(f) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(v) - 0x3f000000u));
  }
  // Rebias 127 -> 15 and round 23 mantissa bits to 10, ties to even (a carry bumps the
  // exponent, which is right).
  const uint32_t odd = (f >> 13) & 1u;
  f += 0xc8000fffu + odd;  // ((15 - 127) << 23) + 0xfff, modulo 2^32
  return static_cast<uint16_t>(sign | (f >> 13));
}

// Directed rounding to binary16 for finite v, saturating at +-65504. Quantizers round their
// scales (up) and offsets (down) with them so that the stored values still cover the block's
// range.
inline uint16_t Fp16NextUp(uint16_t h) {  // finite h; -0 -> smallest positive; 65504 stays
  if (h == 0x8000u) return 0x0001u;
  if (h & 0x8000u) return static_cast<uint16_t>(h - 1);
  return h >= 0x7bffu ? static_cast<uint16_t>(0x7bffu) : static_cast<uint16_t>(h + 1);
}
inline uint16_t Fp16NextDown(uint16_t h) {  // finite h; +0 -> smallest negative; -65504 stays
  if (h == 0x0000u) return 0x8001u;
  if (!(h & 0x8000u)) return static_cast<uint16_t>(h - 1);
  return h >= 0xfbffu ? static_cast<uint16_t>(0xfbffu) : static_cast<uint16_t>(h + 1);
}
// The smallest binary16 value >= v (65504 if none).
inline uint16_t Fp16RoundUp(float v) {
  uint16_t h = FloatToFp16(v);
  if ((h & 0x7fffu) >= 0x7c00u) return (h & 0x8000u) ? 0xfbffu : 0x7bffu;
  if (Fp16ToFloat(h) < v) h = Fp16NextUp(h);
  return h;
}
// The largest binary16 value <= v (-65504 if none).
inline uint16_t Fp16RoundDown(float v) {
  uint16_t h = FloatToFp16(v);
  if ((h & 0x7fffu) >= 0x7c00u) return (h & 0x8000u) ? 0xfbffu : 0x7bffu;
  if (Fp16ToFloat(h) > v) h = Fp16NextDown(h);
  return h;
}

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even; NaN stays a quiet NaN.
inline uint16_t FloatToBf16(float x) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

}  // namespace kvserve::quant
