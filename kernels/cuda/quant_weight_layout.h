// The device layout of group-quantized int4 / int8 weights (W4A16, W8A16) and its host-side
// packer. Plain C++ (no CUDA types): the loaders build a PackedGroupQuantWeight on the host,
// copy its three byte arrays to the device as they are, and hand the kernels of quant_gemv.h
// a QuantWeightView of them. Built in every configuration, so CPU CI tests the byte layout.
//
// A weight W [out][in] (the checkpoint's row-major layout, as gemm.h) is cut along `in` into
// groups of `group` (32, 64 or 128) elements. Element (o, i) has an unsigned code q (0..15 for
// 4 bits, 0..255 for 8 bits); its group g = i / group has an fp16 scale s[o][g] and a zero
// point z[o][g], and
//
//     W[o][i] = s[o][i / group] * (q[o][i] - z[o][i / group])
//
// Three arrays, each row-major by output row:
//
//   codes   out rows of in*bits/8 bytes (a multiple of 16: in % group == 0, so every row
//           starts 16-byte aligned when the array does). 8 bits: byte i is q[o][i].
//           4 bits: byte i/2 holds q[o][i] in its low nibble when i is even, in its high
//           nibble when i is odd; so the little-endian 32-bit word k holds elements 8k..8k+7,
//           element 8k+j at bits 4j..4j+3, and one 16-byte load carries 32 elements of one
//           group (32 divides every group size).
//
//             byte:    0         1         2       ...    15
//             nibble: lo  hi    lo  hi    lo  hi   ...   lo  hi
//             element: 0   1     2   3     4   5   ...   30  31
//
//   scales  out rows of in/group IEEE fp16 values (bit patterns, uint16).
//   zeros   out rows of in/group uint8 zero codes; or empty: the symmetric case, where every
//           zero is the midpoint 2^(bits-1) (8 or 128).
//
// Feeding it from the checkpoint formats (a loader converts once, at load; quant_weight_import.h
// implements each of these):
//   GGUF Q4_0  group 32, s = d, q = the nibble, symmetric (z = 8). The block's element j < 16 is
//              the low nibble of qs[j], element j+16 the high nibble: reorder into the sequential
//              nibble order above.
//   GGUF Q8_0  group 32, s = d, int8 qs: 8 bits, q = qs + 128 (as unsigned), symmetric (z = 128).
//   GGUF Q4_1, Q5_x, K-quants: not this layout (a float minimum, 5/6-bit codes, super-blocks).
//   AWQ (GEMM) 4 bits, group = group_size, zeros present. qweight [in][out/8] packs along `out`
//              in the order [0,2,4,6,1,3,5,7]; un-interleave, transpose to [out][in]; qzeros the
//              same, transposed to [out][in/group]; scales fp16 [in/group][out] transposed.
//   GPTQ       bits 4 or 8, qweight [in*bits/32][out] packed along `in` (input row 8r+j at bits
//              4j of word row r for 4 bits): unpack, transpose. Symmetric: z = 8 / 128, or store
//              the zeros. v1 checkpoints (`checkpoint_format: gptq`) store z - 1: add 1.
//              desc_act (non-monotonic g_idx) does not fit groups of consecutive inputs: the
//              loader must permute the inputs by argsort(g_idx) (weights once, activations per
//              call) or refuse; nothing here does that.
//   compressed-tensors pack-quantized: weight_packed [out][in/8] packs along `in` (element 8k+j
//              at bits 4j), values are signed + 2^(bits-1), i.e. already q; weight_scale
//              [out][in/group] (channel strategy, one scale per row: groups of 128 with the
//              scale repeated); weight_zero_point [out/8][groups] packed along `out` with the
//              same offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::kernels::cuda {

struct GroupQuantShape {
  int bits = 4;     // 4 or 8
  int out = 0;      // output features (rows of W)
  int in = 0;       // input features, a multiple of group
  int group = 128;  // 32, 64 or 128
  bool has_zeros = false;

  int groups_per_row() const { return in / group; }
  int64_t code_row_bytes() const { return static_cast<int64_t>(in) * bits / 8; }
  int symmetric_zero() const { return 1 << (bits - 1); }
};

// The three arrays of the layout above, on the host.
struct PackedGroupQuantWeight {
  GroupQuantShape shape;
  std::vector<uint8_t> codes;    // out * code_row_bytes()
  std::vector<uint16_t> scales;  // out * groups_per_row(), fp16 bits
  std::vector<uint8_t> zeros;    // out * groups_per_row(), or empty when !has_zeros
};

// Checks a shape: bits 4 or 8, group 32/64/128, out >= 1, in >= group and in % group == 0.
absl::Status ValidateGroupQuantShape(const GroupQuantShape& shape);

// Packs plain per-element codes (one uint8 per element, [out][in], each < 2^bits), fp16 scales
// ([out][in/group]) and, when shape.has_zeros, zero codes ([out][in/group], each < 2^bits).
// Errors name the array and the first bad index.
absl::StatusOr<PackedGroupQuantWeight> PackGroupQuantWeight(const GroupQuantShape& shape,
                                                            std::span<const uint8_t> codes,
                                                            std::span<const uint16_t> scales,
                                                            std::span<const uint8_t> zeros);

// The code of element (o, i) read back from packed codes (for loaders' checks and tests of
// other layouts built on this one).
int PackedCode(const PackedGroupQuantWeight& w, int o, int i);

}  // namespace kvserve::kernels::cuda
