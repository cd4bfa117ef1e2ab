// The portable FP8 kernel (fp8_format.h): plain C++ in the canonical order, with std::fma for
// every fused step, so it equals the AVX2 and AVX-512 kernels bit for bit (tests run it on
// every CPU). The widened values come from a 256-entry table built from the e4m3 definition.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "kernels/cpu/quant/fp8_format.h"

namespace kvserve::kernels::cpu::quant {
namespace {

std::array<float, 256> MakeWidened() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    // (value * 2^-8): subnormal m * 2^-9 * 2^-8; normal (8 + m) * 2^(e - 10) * 2^-8. A NaN
    // code (e 15, m 7) takes the normal formula, as the vector widening does (±480 * 2^-8).
    const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -17)
                             : std::ldexp(static_cast<float>(8 + m), e - 18);
    t[static_cast<size_t>(b)] = (b & 0x80) != 0 ? -mag : mag;
  }
  return t;
}

const std::array<float, 256>& Widened() {
  static const std::array<float, 256> table = MakeWidened();
  return table;
}

void KernelPortable(const Fp8Tile& t, int rows, int panels) {
  const std::array<float, 256>& wv = Widened();
  float acc[kFp8MaxTileRows][4][kFp8PanelRows] = {};
  const int64_t kblocks = (t.in + kFp8KBlock - 1) / kFp8KBlock;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int n = static_cast<int>(std::min<int64_t>(kFp8KBlock, t.in - kb * kFp8KBlock));
    for (int p = 0; p < panels; ++p) {
      const uint8_t* blk = t.panels + p * t.panel_bytes + kb * kFp8BlockBytes;
      const float* scale = reinterpret_cast<const float*>(blk);
      const uint8_t* codes = blk + kFp8ScaleBytes;
      for (int r = 0; r < rows; ++r) {
        const float* x = t.x + r * t.x_stride + kb * kFp8KBlock;
        for (int o = 0; o < kFp8PanelRows; ++o) {
          float c0 = 0.0f, c1 = 0.0f;
          for (int k = 0; k < n; k += 2) c0 = std::fma(wv[codes[kFp8PanelRows * k + o]], x[k], c0);
          for (int k = 1; k < n; k += 2) c1 = std::fma(wv[codes[kFp8PanelRows * k + o]], x[k], c1);
          acc[r][p][o] = std::fma(c0 + c1, scale[o], acc[r][p][o]);
        }
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* y = t.y + r * t.y_stride;
    for (int i = 0; i < std::min(t.valid, panels * kFp8PanelRows); ++i) {
      float v = acc[r][i / kFp8PanelRows][i % kFp8PanelRows];
      if (t.accumulate) v = v + y[i];
      if (t.bias != nullptr) v = v + t.bias[i];
      y[i] = v;
    }
  }
}

template <int R, int P>
void Run(const Fp8Tile& t) {
  KernelPortable(t, R, P);
}

template <int... Rs>
constexpr Fp8KernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  Fp8KernelTable table{};
  ((table.fn[0][Rs] = &Run<Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &Run<(Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &Run<1, 4>;
  return table;
}

}  // namespace

float Fp8WidenedValue(uint8_t code) { return Widened()[code]; }

const Fp8KernelTable& Fp8PortableKernels() {
  static constexpr Fp8KernelTable kTable =
      MakeTable(std::make_integer_sequence<int, kFp8MaxTileRows>{});
  return kTable;
}

}  // namespace kvserve::kernels::cpu::quant
