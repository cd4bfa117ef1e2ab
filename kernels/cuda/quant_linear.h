// y = x · Wᵀ (+ y) on a group-quantized W (quant_weight_layout.h) at any batch: the dispatch
// between the decode GEMV and the batched path. Plain C++ header.
//
//   rows <= kMaxGemvRows (and QuantGemvApplies)   QuantGemv: reads the packed codes directly
//   otherwise                                     DequantizeGroupQuant into `workspace` (W as
//                                                 bf16 or fp16 [out][in], the activations'
//                                                 dtype), then CublasGemm::Linear on it
//
// The batched path re-expands W on every call: out·in·2 bytes written and read again, about
// 5x (int4) or 3x (int8) the packed bytes, which a prefill of more than a few dozen rows
// amortizes; a tensor-core mixed-input GEMM (Marlin-style) would not pay it and is not here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quant_gemv.h"

namespace kvserve::kernels::cuda {

// Bytes of device workspace QuantLinear needs for rows > kMaxGemvRows: out·in 16-bit values.
size_t QuantLinearWorkspaceBytes(const GroupQuantShape& shape);

// act: kBf16 or kFp16. Runs on gemm's stream. workspace: 16-byte aligned, at least
// QuantLinearWorkspaceBytes(w.shape) bytes (may be null when rows <= kMaxGemvRows).
absl::Status QuantLinear(CublasGemm& gemm, GemmDtype act, const void* x, int64_t x_stride,
                         const QuantWeightView& w, float* y, int64_t y_stride, int64_t rows,
                         bool accumulate, void* workspace, size_t workspace_bytes);

}  // namespace kvserve::kernels::cuda
