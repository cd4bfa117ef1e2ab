#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gemv_bf16.h"

namespace kvserve::kernels::cuda {
namespace {

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

absl::Status CublasError(cublasStatus_t s, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(s), ": ", cublasGetStatusString(s)));
}

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

absl::StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(void* stream) {
  cublasHandle_t h = nullptr;
  cublasStatus_t s = cublasCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS: cublasCreate: ", cublasGetStatusName(s), " (no usable device or driver?)"));
  }
  s = cublasSetStream(h, static_cast<cudaStream_t>(stream));
  // Default math: no TF32 for fp32 operands unless the compute type asks for it (it never does).
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return CublasError(s, "cuBLAS: setting up the handle");
  }
  return std::unique_ptr<CublasGemm>(new CublasGemm(h));
}

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) cublasDestroy(AsHandle(handle_));
}

absl::Status CublasGemm::SetStream(void* stream) {
  const cublasStatus_t s = cublasSetStream(AsHandle(handle_), static_cast<cudaStream_t>(stream));
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cuBLAS: cublasSetStream");
  return absl::OkStatus();
}

void* CublasGemm::stream() const {
  cudaStream_t stream = nullptr;
  if (cublasGetStream(AsHandle(handle_), &stream) != CUBLAS_STATUS_SUCCESS) return nullptr;
  return stream;
}

absl::Status CublasGemm::Linear(GemmDtype dtype, const void* x, int64_t x_stride, const void* w, float* y,
                                int64_t y_stride, int64_t rows, int in, int out, bool accumulate) {
  if (rows == 0) return absl::OkStatus();
  if (!FitsInt(rows) || !FitsInt(x_stride) || !FitsInt(y_stride) || in < 1 || out < 1 || x_stride < in ||
      y_stride < out) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLAS linear: bad shape rows=", rows, " in=", in, " out=", out,
                                                   " x_stride=", x_stride, " y_stride=", y_stride));
  }
  const bool bf16 = dtype == GemmDtype::kBf16;
  if (bf16 && GemvBf16Applies(x, x_stride, w, rows, in)) {
    cudaStream_t stream = nullptr;
    const cublasStatus_t gs = cublasGetStream(AsHandle(handle_), &stream);
    if (gs != CUBLAS_STATUS_SUCCESS) return CublasError(gs, "cuBLAS: cublasGetStream");
    const int err = GemvBf16(static_cast<const uint16_t*>(x), x_stride, static_cast<const uint16_t*>(w), y, y_stride,
                             rows, in, out, accumulate, stream);
    if (err != 0) {
      return absl::InternalError(absl::StrCat("bf16 GEMV: ", cudaGetErrorString(static_cast<cudaError_t>(err))));
    }
    return absl::OkStatus();
  }
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  const bool fp16 = dtype == GemmDtype::kFp16;
  const cudaDataType_t ab = bf16 ? CUDA_R_16BF : (fp16 ? CUDA_R_16F : CUDA_R_32F);
  const cublasComputeType_t compute = (bf16 || fp16) ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const cublasStatus_t s =
      cublasGemmEx(AsHandle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(rows), in, &alpha, w, ab, in, x,
                   ab, static_cast<int>(x_stride), &beta, y, CUDA_R_32F, static_cast<int>(y_stride), compute,
                   CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cuBLAS linear (cublasGemmEx)");
  return absl::OkStatus();
}

}  // namespace kvserve::kernels::cuda
