#include "kernels/cuda/quant_linear.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace kvserve::kernels::cuda {
namespace {

absl::Status CudaStatus(int err, absl::string_view what) {
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorString(static_cast<cudaError_t>(err))));
}

}  // namespace

size_t QuantLinearWorkspaceBytes(const GroupQuantShape& shape) {
  return static_cast<size_t>(shape.out) * static_cast<size_t>(shape.in) * 2;
}

absl::Status QuantLinear(CublasGemm& gemm, GemmDtype act, const void* x, int64_t x_stride,
                         const QuantWeightView& w, float* y, int64_t y_stride, int64_t rows,
                         bool accumulate, void* workspace, size_t workspace_bytes) {
  if (rows == 0) return absl::OkStatus();
  if (act != GemmDtype::kBf16 && act != GemmDtype::kFp16) {
    return absl::InvalidArgumentError("quantized linear: activations must be bf16 or fp16");
  }
  if (absl::Status s = ValidateGroupQuantShape(w.shape); !s.ok()) return s;
  if (QuantGemvApplies(act, x, x_stride, w, rows)) {
    return CudaStatus(QuantGemv(act, x, x_stride, w, y, y_stride, rows, accumulate, gemm.stream()),
                      absl::StrCat("W", w.shape.bits, "A16 GEMV"));
  }
  if (workspace == nullptr || workspace_bytes < QuantLinearWorkspaceBytes(w.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantized linear: ", rows, " rows need a workspace of ",
                     QuantLinearWorkspaceBytes(w.shape), " bytes, got ",
                     workspace == nullptr ? 0 : workspace_bytes));
  }
  if (absl::Status s = CudaStatus(DequantizeGroupQuant(w, act, workspace, gemm.stream()),
                                  absl::StrCat("dequantizing a W", w.shape.bits, " weight"));
      !s.ok()) {
    return s;
  }
  return gemm.Linear(act, x, x_stride, workspace, y, y_stride, rows, w.shape.in, w.shape.out,
                     accumulate);
}

}  // namespace kvserve::kernels::cuda
