// Projections of Hugging Face FP8 checkpoints (hf_fp8_config.h), read into the quantized
// linear layer's FP8 segments (kernels/cpu/quant/fp8_segment.h) with the weights kept at 8
// bits:
//
//   WeightSpec qkv = q_proj | k_proj | v_proj              QuantMatrix segments
//     q_proj.weight F8_E4M3 [q][D] + q_proj.weight_scale_inv [ceil(q/128)][ceil(D/128)]
//                                                      ──► [ FP8 rows of q, scale per (row, kb) ]
//     k_proj ... v_proj likewise                       ──► [ FP8 ... ] [ FP8 ... ]
//
// Every scale granularity (per-tensor [] / [1], per-channel [out] / [out][1], per-group
// [out][in/g], per-block [ceil(out/br)][ceil(in/bc)]; F32, BF16 or F16) is expanded at load
// into one scale per row and 128-column block, which is exact because column blocks and groups
// are multiples of 128 (the config parser refuses others). Ragged edge blocks (a dimension not
// a multiple of the block) take the scale of the block they start. A stacked spec may mix
// FP8 and F32/F16/BF16 tensors (modules left unconverted): the latter become dense segments.
//
// Codes are not scanned for e4m3's NaN bytes (s 1111 111): the format's quantizers saturate
// at ±448 and never write them, the repack copies bytes without interpreting them, and the
// GGUF path treats block data the same way; a NaN byte would run as ±480 (fp8_format.h).
// Scales are checked finite at load.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "kernels/cpu/quant/quant_linear.h"
#include "model/checkpoint_map.h"
#include "model/hf_fp8_config.h"
#include "model/safetensors.h"

namespace kvserve::model {

// Whether any tensor of the spec is stored as F8_E4M3. An F8_E5M2 tensor is InvalidArgument
// naming the file, tensor and dtype.
absl::StatusOr<bool> SpecHasFp8(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

// The spec's tensors as one quantized matrix [rows][cols], one segment per tensor. An
// F8_E4M3 tensor needs `config` (else InvalidArgument: no scales are defined), must not be
// listed in its ignore list, and needs its scale tensor of the shape the config implies.
absl::StatusOr<kernels::cpu::quant::QuantMatrix> PackFp8Projection(
    const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
    const std::optional<HfFp8Config>& config);

}  // namespace kvserve::model
