#include "tests/support/hf_models/mxfp4.h"

#include <cmath>

namespace kvserve::testing::hf {

double Fp4E2M1Value(uint8_t code) {
  static constexpr double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double m = kMagnitude[code & 7u];
  return (code & 8u) ? -m : m;
}

std::vector<double> DequantMxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                                 int64_t rows, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows * cols));
  const int64_t nblocks = cols / kMxfp4Block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const double scale =
          std::ldexp(1.0, static_cast<int>(scales[static_cast<size_t>(r * nblocks + b)]) - 127);
      for (int j = 0; j < kMxfp4Block / 2; ++j) {
        const uint8_t byte = blocks[static_cast<size_t>((r * nblocks + b) * (kMxfp4Block / 2) + j)];
        const int64_t col = b * kMxfp4Block + 2 * j;
        out[static_cast<size_t>(r * cols + col)] = Fp4E2M1Value(byte & 0x0F) * scale;
        out[static_cast<size_t>(r * cols + col + 1)] = Fp4E2M1Value(byte >> 4) * scale;
      }
    }
  }
  return out;
}

}  // namespace kvserve::testing::hf
