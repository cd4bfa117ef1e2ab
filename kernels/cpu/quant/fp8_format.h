// FP8 (e4m3fn) weight segments of QuantLinear (internal to kernels/cpu/quant): the repacked
// layout, the decode of one byte, the canonical order of every output's fp32 operations, and
// the kernels of each instruction set.
//
// e4m3fn byte = s eeee mmm, exponent bias 7: e > 0: (-1)^s 2^(e-7) (1 + m/8); e = 0:
// (-1)^s 2^-6 (m/8) (subnormal); s 1111 111 is NaN (no infinities, largest finite 448).
//
// Layout (weights stay 8 bits per value; 1/32 more for the scales):
//
//   panel p  = output rows [16p, 16p + 16) of the segment (the tail panel is zero-padded)
//   panel    = k-blocks kb = 0 .. ceil(in/128) - 1, back to back, each kFp8BlockBytes:
//   k-block  = [ f32 scale[16] (64 B) ][ codes: 128 columns x 16 rows (2048 B) ]
//              code byte 16 k + r = w[16p + r][128 kb + k] (zero past `in` and past the rows)
//              ┌ k=0: row0 row1 .. row15 ┐ one 16-byte load = one column of the panel,
//              │ k=1: row0 row1 .. row15 │ widened to 16 fp32 lanes (one per output row)
//              └ ...                     ┘ and multiplied by one broadcast activation
//   scale[r] = 2^8 * (the checkpoint's scale of row 16p + r over columns 128kb .. 128kb + 127):
//              per-tensor, per-channel, per-group (multiples of 128) and 128-column block
//              scales all take this one form exactly (the loader expands them).
//
// Widening, exact: a code's bits placed into an IEEE half (s | 0eeee | mmm0000000) are the
// value times 2^-8 (both formats' subnormals included: bias 15 against 7), and the F16C
// conversion (vcvtph2ps) turns every half, subnormal ones too, into the exact fp32 value
// whatever MXCSR's DAZ says; the 2^8 lives in the stored scale (power-of-two scaling is exact
// in fp32 for any scale below 2^119). With sign extension to 16 bits the placement is
// (int16(byte) << 7) & 0xBF80: one shift, one and. A NaN byte (s 1111 111) comes out as
// ±480 (the half 1.875 * 2^0, times 2^8): codes are not scanned for it (see docs/quantized.md).
//
// Canonical order (every kernel, every tile shape, any batch: results equal bit for bit,
// and a row's outputs never depend on the other rows): for output o and k-block kb with
// n = min(128, in - 128 kb) columns,
//   c0 = fma chain over even k < n of w'[k] * x[k] (starting from 0), c1 likewise over odd k,
//   acc = fma(c0 + c1, scale'[o][kb], acc)      (acc starts at 0; w' = w * 2^-8)
// then y = acc (+ y when accumulating) (+ bias). Activations are the caller's fp32 values:
// no activation rounding (a GPU FP8 GEMM rounds them to e4m3; this is at least as accurate).
//
// Error bound (tests/unit/kernels/quant/fp8_linear_test.cc): fp32 rounding only,
//   |y - Σ_k s_k w_k x_k| <= (n_max/2 + ceil(in/128) + 3) * 2^-24 * Σ_k |s_k w_k x_k| (+ O(2^-48))
// with n_max/2 = 64 the longest chain within a block.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu::quant {

inline constexpr int kFp8PanelRows = 16;
inline constexpr int kFp8KBlock = 128;
inline constexpr int kFp8ScaleBytes = kFp8PanelRows * 4;
inline constexpr int kFp8BlockBytes = kFp8ScaleBytes + kFp8KBlock * kFp8PanelRows;
// The stored scale is the checkpoint's times this (the widening leaves values times 2^-8).
inline constexpr float kFp8ScaleFactor = 256.0f;

// One kernel call: R activation rows x P panels (16 outputs each) over all of `in`.
struct Fp8Tile {
  const float* x;  // row 0's activations (in floats); row r at x + r * x_stride
  int64_t x_stride;
  const uint8_t* panels;  // the first panel; panel p at panels + p * panel_bytes
  int64_t panel_bytes;
  int64_t in;
  float* y;  // output column of the first panel's first row; row r at y + r * y_stride
  int64_t y_stride;
  const float* bias;  // at the same column, or nullptr
  int valid;          // outputs of these panels that exist (<= P * 16)
  bool accumulate;
};

using Fp8KernelFn = void (*)(const Fp8Tile&);
inline constexpr int kFp8MaxTileRows = 8;

// fn[pi][R - 1], pi: 0 -> 1 panel, 1 -> 2 panels, 2 -> 4 panels; null where not built
// (4 panels only for R = 1, 2 panels for R <= 4).
struct Fp8KernelTable {
  Fp8KernelFn fn[3][kFp8MaxTileRows];
};

// The widened value of a code, w * 2^-8 (NaN codes: ±480 * 2^-8), as every kernel computes it.
float Fp8WidenedValue(uint8_t code);

bool Fp8CpuHasAvx512();
const Fp8KernelTable& Fp8Avx512Kernels();  // only when Fp8CpuHasAvx512()
// Prefill (many rows, one panel: t.valid <= 16): each block widened once into an L1 buffer
// and run over up to 64 rows, 8 at a time, from there (same canonical order). Widening costs
// about as much as the multiply-adds of 4-8 rows, so sharing it over 64 rows brings prefill to
// the fp32 kernels' rate (docs/quantized.md has the figures).
void Fp8Avx512PanelRows(const Fp8Tile& t, int64_t rows);
// The same on AVX2 (two 8-lane halves per column, 2 rows at a time).
void Fp8Avx2PanelRows(const Fp8Tile& t, int64_t rows);
bool Fp8CpuHasAvx2();
const Fp8KernelTable& Fp8Avx2Kernels();  // only when Fp8CpuHasAvx2()
const Fp8KernelTable& Fp8PortableKernels();

}  // namespace kvserve::kernels::cpu::quant
