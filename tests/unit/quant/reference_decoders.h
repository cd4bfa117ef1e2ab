// Float64 reference decoders for the ggml block types, written from the layout description
// (docs: ../shared/reference/quantized-weights.md §2), element by element, independently of
// quant/blocks/. Each decodes ONE block into its block_elements floats.
//
// How they are made bit-exact with ggml's fp32 decoders: every arithmetic step is done in
// float64 on operands that are fp32 values, then rounded to fp32 with R(), in the order ggml
// computes (e.g. Q4_K: d1 = R(d*sc), m1 = R(dmin*mn), y = R(R(d1*q) - m1)). For + - * of two
// fp32 values, the float64 result rounded to fp32 equals the correctly rounded fp32 operation
// (53 >= 2*24 + 2 bits, so the double rounding is innocuous); products of an fp32 and a small
// integer are even exact in float64. So each R(...) is exactly the fp32 op, without relying on
// the compiler's fp32 code generation.
#pragma once

#include <cstdint>
#include <limits>

namespace kvserve::quant::testing {

// Rounds a float64 result to fp32 (one IEEE round-to-nearest-even; beyond the largest float
// plus half an ulp, +-inf, spelled out because that conversion is undefined in C++).
inline float R(double v) {
  if (v >= 0x1.ffffffp127) return std::numeric_limits<float>::infinity();
  if (v <= -0x1.ffffffp127) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// IEEE binary16 -> value, from the field definition (sign, 5-bit exponent, 10-bit mantissa).
double RefFp16(uint16_t h);
// bfloat16 -> value (sign, 8-bit exponent, 7-bit mantissa).
double RefBf16(uint16_t h);

// The packed 6-bit codes of one block, read from the layout: Q4_K / Q5_K the 8 scales then
// the 8 mins, Q3_K the 16 scales, IQ4_XS the 8 scales. Returns how many (0 for other types;
// `ggml_type_id` as in the file format). For checking that tests cover every pattern.
int RefSixBitCodes(uint32_t ggml_type_id, const uint8_t* blk, int* codes);

void RefDecodeQ4_0(const uint8_t* blk, float* out);
void RefDecodeQ4_1(const uint8_t* blk, float* out);
void RefDecodeQ5_0(const uint8_t* blk, float* out);
void RefDecodeQ5_1(const uint8_t* blk, float* out);
void RefDecodeQ8_0(const uint8_t* blk, float* out);
void RefDecodeQ2_K(const uint8_t* blk, float* out);
void RefDecodeQ3_K(const uint8_t* blk, float* out);
void RefDecodeQ4_K(const uint8_t* blk, float* out);
void RefDecodeQ5_K(const uint8_t* blk, float* out);
void RefDecodeQ6_K(const uint8_t* blk, float* out);
void RefDecodeIQ4_NL(const uint8_t* blk, float* out);
void RefDecodeIQ4_XS(const uint8_t* blk, float* out);
void RefDecodeMXFP4(const uint8_t* blk, float* out);
// Ours: [a f32 | b f32 | codes]; y = R(R(code * a) + b); U4: nibbles as Q4_0, U8: bytes.
void RefDecodeU4_F32(const uint8_t* blk, float* out);
void RefDecodeU8_F32(const uint8_t* blk, float* out);

}  // namespace kvserve::quant::testing
