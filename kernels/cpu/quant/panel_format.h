// The repacked weight layout that QuantLinear's kernels read (internal to kernels/cpu/quant).
//
// Every quantized type is repacked at load into 16-row panels ("interleaved rows"): one
// 64-byte vector holds 4 consecutive elements of each of the panel's 16 output rows, so one
// 4-byte group of an activation row, broadcast, feeds 16 outputs in one vpdpbusd
// (u8 weight code x s8 activation -> s32, summed over the 4 elements):
//
//   panel p = output rows [16p, 16p + 16) of a segment (the tail panel is zero-padded)
//   panel   = units u = 0 .. in_pad/(32*U) - 1, back to back (in_pad: `in` rounded up to a
//             unit; padding blocks are zero); U = 8 blocks for K-quants, 2 for kD/kDM, 1 else
//   unit    = [ header ][ codes of block 0 ][ codes of block 1 ] ... [ codes of block U-1 ]
//   header  = [ unit fields (kK, kQ6) ][ scales of block 0 ] ... [ scales of block U-1 ],
//             zero-padded to a multiple of 64 bytes, so every code vector is 64-byte aligned
//   block   = 32 input elements x 16 rows
//
//   codes, kNib (4-bit codes, 256 bytes):
//     vector j = 0..3 (64 bytes): byte 4*row + e = code[row][4j + e] | code[row][16 + 4j + e] << 4
//       ┌ row0: k 4j..4j+3 | row1: k 4j..4j+3 | ... | row15 ┐  low nibbles: elements 0..15
//       └──────── 16 rows x 4 bytes = 64 bytes ─────────────┘  high nibbles: elements 16..31
//   codes, kNibHi1 (5-bit): kNib + one bit plane (64 bytes): u64 mask j = 0..7, bit 4*row + e
//     = bit 4 of code[row][4j + e] (a masked byte add of 16 restores it: vpaddb{k})
//   codes, kNibHi2 (6-bit): kNib + 2 "crumb" vectors (128 bytes) with bits 4..5 of each code:
//     vector c = 0, 1: byte 4*row + e = h(4j + e) | h(16 + 4j + e) << 2 | h(4j' + e) << 4 |
//     h(16 + 4j' + e) << 6 with j = 2c, j' = 2c + 1, h(k) = code[row][k] >> 4: a shift and a
//     bit select (vpternlogd) merge them into nibble vector j (fewer ops than bit planes)
//   codes, kBytes (8-bit, 512 bytes): vector j = 0..7: byte 4*row + e = code[row][4j + e]
//
//   Every code is unsigned (u8 side of vpdpbusd); a block's weights are w = a * code + b with
//   a, b per row and per 16 or 32 elements, given by the scale scheme:
//     kD   scales: f16 d[16]                     a = d, b = off * d (off per type: Q4_0 -8,
//                                                 Q5_0 -16, Q8_0 and IQ4_NL -128: code = q + 128)
//     kDM  scales: f16 d[16], f16 m[16]           a = d, b = m             (Q4_1, Q5_1)
//     kK   unit fields: f16 d[16], f16 dmin[16]; scales: u8 sc[16], u8 mn[16]
//                                                 a = d*sc, b = -(dmin*mn)  (Q4_K, Q5_K)
//     kQ6  unit fields: f16 d[16]; scales: s8 sc_lo[16], s8 sc_hi[16] (elements 0..15, 16..31)
//                                                 w = (d*sc) * (code - 32) (Q6_K)
//     kF32 scales: f32 a_lo[16], a_hi[16], b_lo[16], b_hi[16] (per 16 elements)
//                                                 the generic scheme (Q2_K, Q3_K, IQ4_*, MXFP4)
//     kAB  scales: f32 a[16], f32 b[16]           a, b per 32 elements (our U4_F32 / U8_F32:
//                                                 Hugging Face AWQ/GPTQ/compressed-tensors
//                                                 groups with a zero point or a bf16/f32 scale;
//                                                 b = -zero*scale is exact in f32, not in f16)
//   The scale fields are the source's own (f16 d copied bit for bit, 6-bit scales as bytes),
//   so the repacked bytes per weight stay close to the file's: Q4_0 4.5, Q8_0 8.5, Q4_K
//   4.625 (file 4.5), Q5_K 5.625 (5.5), Q6_K 6.625 (6.5625); kAB: U4_F32 6 (an AWQ/GPTQ
//   int4 group-128 file ~4.16), U8_F32 10 (int8 per channel ~8). Slower, documented: the generic
//   scheme (byte codes + f32 scales, 12 bits per weight) streams 3-4x the file's bytes of
//   Q2_K/Q3_K/IQ4_XS/MXFP4 at batch 1, and IQ4_NL's byte codes 8.5 bits (file 4.5).
//
// Activations: each row is quantized per 32 elements (Q8_0-like): dx = amax/127,
// q = round-to-nearest-even(x/dx) in [-127, 127], with the block's sums of q over elements
// 0..15 and 16..31 (for the b terms). One block's contribution to an output is
//     a*dx*Σ code*q + b*dx*Σ q        (per 16 elements for kQ6/kF32, per 32 otherwise)
// with the Σ exact in int32 and the rest in fp32.
//
// Error bound (tested in tests/unit/kernels/quant): with w the dequantized weights, x̂ = dx*q
// the rounded activations (|x - x̂| <= dx/2 = amax_b/254 per element),
//   |y - Σ w x| <= Σ_k |w_k| * amax_b(k) / 254                       (activation rounding)
//                + (in/32 + 4) * 2^-24 * Σ_k S(k) * amax_b(k)          (fp32 rounding)
// where amax_b(k) is the largest |x| in k's activation block and S(k) = |a|*max code + |b| of
// k's scale group: each block adds its terms a*dx*Σ code*q and b*dx*Σq (each at most
// 32 * S * amax_b) into an fp32 accumulator, one rounding per operation, at most in/32 + 4
// roundings in a chain. When a block's codes span their range (as quantizers make them),
// S <= ~4 W_b with W_b the block's largest |w| (e.g. Q8_0: code = q + 128, |a*code| + |b| <=
// 383 d against W_b = 127 d); the test uses 8 W_b. The first term dominates: about 0.4 % of
// Σ|w|*amax_b, the cost llama.cpp's Q8_0/Q8_K activations have too. F32/F16/BF16 segments run
// packed_linear's fp32 kernels: fp32 rounding only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve::kernels::cpu::quant {

inline constexpr int kPanelRows = 16;
inline constexpr int kBlock = 32;

enum class Codes : uint8_t { kNib, kNibHi1, kNibHi2, kBytes };
enum class Scales : uint8_t { kD, kDM, kK, kQ6, kF32, kAB };

constexpr int CodeBytes(Codes c) {
  switch (c) {
    case Codes::kNib:
      return 256;
    case Codes::kNibHi1:
      return 320;
    case Codes::kNibHi2:
      return 384;
    case Codes::kBytes:
      return 512;
  }
  return 0;
}
constexpr int ScaleBytes(Scales s) {
  switch (s) {
    case Scales::kD:
      return 32;
    case Scales::kDM:
      return 64;
    case Scales::kK:
      return 32;
    case Scales::kQ6:
      return 32;
    case Scales::kF32:
      return 256;
    case Scales::kAB:
      return 128;
  }
  return 0;
}
constexpr int UnitBlocks(Scales s) {
  return s == Scales::kK || s == Scales::kQ6 ? 8 : s == Scales::kF32 ? 1 : 2;
}
constexpr int UnitFieldBytes(Scales s) { return s == Scales::kK ? 64 : s == Scales::kQ6 ? 32 : 0; }
constexpr int HeaderBytes(Scales s) {
  return (UnitFieldBytes(s) + UnitBlocks(s) * ScaleBytes(s) + 63) / 64 * 64;
}
constexpr int UnitBytes(Codes c, Scales s) { return HeaderBytes(s) + UnitBlocks(s) * CodeBytes(c); }
constexpr int ScalesAt(Scales s, int b) { return UnitFieldBytes(s) + b * ScaleBytes(s); }
constexpr int CodesAt(Codes c, Scales s, int b) { return HeaderBytes(s) + b * CodeBytes(c); }
// True when a and b change every 16 elements (two integer sums per block).
constexpr bool PerHalfBlock(Scales s) { return s == Scales::kQ6 || s == Scales::kF32; }

struct PanelFormat {
  Codes codes;
  Scales scales;
  float off = 0;  // kD only: b = off * d
};

// One quantized activation block (32 elements). sx* = dx * (sum of q) as fp32; bs*32 =
// 32 * (sum of q) for kQ6's "code - 32".
struct ActBlock {
  float dx;
  float sx;
  float sx_lo;
  float sx_hi;
  int32_t bs_lo32;
  int32_t bs_hi32;
};

// ---- writing a block's codes (repack side) ----
// code[row][k]: the 32 codes of each of the 16 rows of one block.
using BlockCodes = uint8_t[kPanelRows][kBlock];
void WriteCodes(Codes c, const BlockCodes& code, uint8_t* dst);

// ---- reading a block back (portable kernel, tests) ----
// Decodes block `b` of the unit at `unit` into codes and per-16-element a, b
// (a[row][0] for elements 0..15, a[row][1] for 16..31).
void DecodeBlock(const PanelFormat& f, const uint8_t* unit, int b, BlockCodes& code,
                 float a[kPanelRows][2], float bias[kPanelRows][2]);

}  // namespace kvserve::kernels::cpu::quant
