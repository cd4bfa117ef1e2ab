// MXFP4 as the gpt-oss release stores expert weights (OCP Microscaling spec; transformers
// integrations/mxfp4.py): 32-element blocks along the input dimension, each block 16 bytes
// of FP4 E2M1 codes (low nibble = even element, high nibble = odd) plus one E8M0 scale byte
// (value 2^(s - 127)). Tensors: `<name>_blocks` uint8 [..., rows, cols / 32, 16] and
// `<name>_scales` uint8 [..., rows, cols / 32], rows = output features.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::testing::hf {

inline constexpr int kMxfp4Block = 32;

// The E2M1 value of a 4-bit code: sign bit 3, then {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
double Fp4E2M1Value(uint8_t code);

// Dequantises one [rows][cols] matrix: blocks [rows][cols / 32][16], scales [rows][cols / 32].
std::vector<double> DequantMxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                                 int64_t rows, int64_t cols);

}  // namespace kvserve::testing::hf
