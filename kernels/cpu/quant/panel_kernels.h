// The panel kernels (internal to kernels/cpu/quant): one call computes R activation rows x
// P panels (16 outputs each) of one segment over all of `in`, from the repacked layout of
// panel_format.h and the per-call quantized activations.
//
//   AVX-512 VNNI (vpdpbusd), one kernel per (codes, scales) format, R x P register tiles:
//     P = 4 for one row (four independent chains per block), P = 2 for 2..4 rows, P = 1 for
//     5..8 rows (prefill: each decoded weight vector feeds 8 rows' dot products).
//   AVX2 (kernel_avx2.cc): vpmaddubsw + vpmaddwd, the same int32 sums and fp32 steps as the
//     VNNI kernels (equal bit for bit), 2 rows x 1 panel in registers.
//   Portable: plain C++, any format, the same tiles (tests run it on every CPU).
//
// Batch invariance: an output's value is a fixed sequence per block (exact int32 sums, then
// the same fp32 fmadds in the same order) whatever R, P, the chunking or the thread count.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant/panel_format.h"

namespace kvserve::kernels::cpu::quant {

struct QTile {
  const int8_t* xq;  // row 0's codes; row r at xq + r * xq_stride
  int64_t xq_stride;
  const ActBlock* xb;  // row 0's blocks; row r at xb + r * xb_stride
  int64_t xb_stride;
  const uint8_t* panels;  // the first panel; panel p at panels + p * panel_bytes
  int64_t panel_bytes;
  int64_t units;  // units per panel
  PanelFormat format;
  float* y;  // output column of the first panel's first row, row r at y + r * y_stride
  int64_t y_stride;
  const float* bias;  // at the same column, or nullptr
  int valid;          // outputs of these panels that exist (<= P * 16)
  bool accumulate;
};

using QKernelFn = void (*)(const QTile&);
inline constexpr int kMaxTileRows = 8;

// fn[pi][R - 1], pi: 0 -> 1 panel, 1 -> 2, 2 -> 4; null where the tile is not built (P = 4
// only for R = 1, P = 2 for R <= 4).
struct QKernelTable {
  QKernelFn fn[3][kMaxTileRows];
};

bool CpuHasAvx512Vnni();
// The VNNI kernels of a format; only call when CpuHasAvx512Vnni().
const QKernelTable& Avx512VnniKernels(const PanelFormat& f);
bool CpuHasAvx2();
// The AVX2 kernels of a format; only call when CpuHasAvx2().
const QKernelTable& Avx2Kernels(const PanelFormat& f);
const QKernelTable& PortableKernels();

}  // namespace kvserve::kernels::cpu::quant
