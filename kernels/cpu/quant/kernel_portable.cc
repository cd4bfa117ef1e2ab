// The portable panel kernel (panel_kernels.h): any format, any tile. Each block of each panel
// is decoded to codes and per-16 (a, b) by DecodeBlock, then per row and output
//   acc += float(Σ_lo code*q) * (a_lo*dx) + b_lo*sx_lo,  then the same for the high half,
// in fp32 with separate multiplies and adds (compiled with -ffp-contract=off). It differs
// from the VNNI kernels in the last bits only (the per-32 schemes group their terms
// differently); QuantLinear picks one kernel per process.
#include <algorithm>
#include <utility>

#include "kernels/cpu/quant/panel_kernels.h"

namespace kvserve::kernels::cpu::quant {
namespace {

void KernelPortable(const QTile& t, int rows, int panels) {
  float acc[kMaxTileRows][4][kPanelRows] = {};
  BlockCodes code;
  float a[kPanelRows][2], bias[kPanelRows][2];
  const int unit_blocks = UnitBlocks(t.format.scales);
  const int unit_bytes = UnitBytes(t.format.codes, t.format.scales);
  for (int64_t u = 0; u < t.units; ++u) {
    for (int b = 0; b < unit_blocks; ++b) {
      const int64_t kb = u * unit_blocks + b;
      for (int p = 0; p < panels; ++p) {
        DecodeBlock(t.format, t.panels + p * t.panel_bytes + u * unit_bytes, b, code, a, bias);
        for (int r = 0; r < rows; ++r) {
          const int8_t* xq = t.xq + r * t.xq_stride + kb * kBlock;
          const ActBlock& xb = t.xb[r * t.xb_stride + kb];
          for (int o = 0; o < kPanelRows; ++o) {
            int32_t lo = 0, hi = 0;
            for (int k = 0; k < 16; ++k) lo += code[o][k] * xq[k];
            for (int k = 16; k < 32; ++k) hi += code[o][k] * xq[k];
            float v = acc[r][p][o];
            v = v + static_cast<float>(lo) * (a[o][0] * xb.dx);
            v = v + bias[o][0] * xb.sx_lo;
            v = v + static_cast<float>(hi) * (a[o][1] * xb.dx);
            v = v + bias[o][1] * xb.sx_hi;
            acc[r][p][o] = v;
          }
        }
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* yr = t.y + r * t.y_stride;
    for (int i = 0; i < std::min(t.valid, panels * kPanelRows); ++i) {
      float v = acc[r][i / kPanelRows][i % kPanelRows];
      if (t.accumulate) v = v + yr[i];
      if (t.bias != nullptr) v = v + t.bias[i];
      yr[i] = v;
    }
  }
}

template <int R, int P>
void Run(const QTile& t) {
  KernelPortable(t, R, P);
}

template <int... Rs>
constexpr QKernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  QKernelTable table{};
  ((table.fn[0][Rs] = &Run<Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &Run<(Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &Run<1, 4>;
  return table;
}

}  // namespace

const QKernelTable& PortableKernels() {
  static constexpr QKernelTable kTable = MakeTable(std::make_integer_sequence<int, kMaxTileRows>{});
  return kTable;
}

}  // namespace kvserve::kernels::cpu::quant
