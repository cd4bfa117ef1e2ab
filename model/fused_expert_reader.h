// Reads one expert's matrix (or bias) out of a fused gpt-oss expert tensor (a WeightSpec with
// a FusedLayout, checkpoint_map.h) as the row-major [rows][cols] matrix every other spec
// gives, so packing and uploading need not know the layout:
//
//   kInputMajor  [E][cols][rows]  element (r, c) = T[e][c][perm(r)]   (a transpose)
//   kVectors     [E][rows]        element r      = T[e][perm(r)]
//   kMxfp4       blocks [E][rows][cols/32][16], scales [E][rows][cols/32]
//                element (r, c) = fp4(nibble of byte c/2 of block c/32, low first) · 2^(scale −
//                127)
//
// perm de-interleaves gpt-oss's gate_up (FusedExpert::interleaved_gate_up): result row r < n/2
// is stored row 2r (gate), row n/2 + r is stored row 2r + 1 (up); otherwise perm(r) = r.
//
// Only the expert's slice is read and checked for NaN/infinity (a whole-tensor scan per expert
// would cost E² reads); the tensor's pages are released after each read, as tensor_reader.h
// does for whole tensors. Internal to tensor_reader.cc, which dispatches fused specs here.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint_map.h"
#include "model/safetensors.h"
#include "model/tensor_reader.h"

namespace kvserve::model::internal {

// The dtype the slice reads as: the tensor's own (F32, BF16, F16), BF16 for MXFP4.
absl::StatusOr<WeightDtype> FusedExpertDtype(const SafetensorsCheckpoint& ckpt,
                                             const WeightSpec& spec);

// The slice's spec.elements() values as `dtype` (which must be FusedExpertDtype) into `out`.
absl::Status ReadFusedExpert(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
                             WeightDtype dtype, std::span<std::byte> out);

// The FP4 E2M1 value of a 4-bit code (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6).
float Fp4E2M1(unsigned code);

}  // namespace kvserve::model::internal
