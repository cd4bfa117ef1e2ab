// Checkpoint tensors into the device layout of quant_weight_layout.h: the conversions its header
// lists, done once at load on the host. Plain C++ (built in every configuration, tested on CPU).
//
//   GGUF Q4_0   block of 32: fp16 d, 16 bytes; element j < 16 the low nibble of byte j, element
//               j + 16 the high nibble; value d·(q − 8)          -> 4 bits, group 32, symmetric
//   GGUF Q8_0   block of 32: fp16 d, 32 int8; value d·q           -> 8 bits, group 32, code q + 128
//   AWQ (GEMM)  qweight int32 [in][out/8], nibble k of word (i, c) is output 8c + kAwqOrder[k];
//               qzeros int32 [in/group][out/8] alike; scales fp16 [in/group][out];
//               value s·(q − z)                                    -> 4 bits, zeros kept
//   GPTQ        qweight int32 [in·bits/32][out], input 32r/bits + j at bits bits·j of word row r;
//               qzeros int32 [in/group][out·bits/32], output 32c/bits + j at bits bits·j of word
//               c; scales fp16 [in/group][out]; g_idx must be i / group (no act-order); v1
//               checkpoints store z − 1 (each field + 1, modulo 2^bits)   -> 4 or 8 bits
//   compressed-tensors pack-quantized: weight_packed int32 [out][in·bits/32], element
//               32k/bits + j at bits bits·j of word k, stored as signed + 2^(bits−1) (= q);
//               weight_scale [out][in/group] (fp16 here: a loader converts bf16/fp32 scales,
//               refusing those fp16 cannot hold); weight_zero_point int32
//               [out·bits/32][in/group] packed along `out` the same way (asymmetric only);
//               channel strategy (one scale per row) becomes group 128 with the scale repeated
//                                                                  -> 4 or 8 bits
//
// GPTQ and AWQ zero points that are all the symmetric midpoint (2^(bits−1)) are dropped
// (has_zeros false). Tensor sizes that disagree with the shape are refused with the tensor's name.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "kernels/cuda/quant_weight_layout.h"

namespace kvserve::kernels::cuda {

// AWQ's packing order: nibble k of a word holds output column 8c + kAwqOrder[k].
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// `data`: out rows of in/32 blocks (in % 32 == 0), as the GGUF tensor stores them.
absl::StatusOr<PackedGroupQuantWeight> PackGgufQ4_0(std::span<const uint8_t> data, int out, int in);
absl::StatusOr<PackedGroupQuantWeight> PackGgufQ8_0(std::span<const uint8_t> data, int out, int in);

absl::StatusOr<PackedGroupQuantWeight> PackAwqGemm(std::span<const int32_t> qweight,
                                                   std::span<const int32_t> qzeros,
                                                   std::span<const uint16_t> scales, int in,
                                                   int out, int group);

// g_idx may be empty (the default i / group).
absl::StatusOr<PackedGroupQuantWeight> PackGptq(std::span<const int32_t> qweight,
                                                std::span<const int32_t> qzeros,
                                                std::span<const uint16_t> scales,
                                                std::span<const int32_t> g_idx, int bits, int in,
                                                int out, int group, bool v1_zero_offset);

// group: 32, 64 or 128, or 0 for the channel strategy (weight_scale [out][1]; in % 128 == 0).
// zero_points empty for symmetric schemes.
absl::StatusOr<PackedGroupQuantWeight> PackCompressedTensors(std::span<const int32_t> weight_packed,
                                                             std::span<const uint16_t> weight_scale,
                                                             std::span<const int32_t> zero_points,
                                                             int bits, int out, int in, int group);

}  // namespace kvserve::kernels::cuda
