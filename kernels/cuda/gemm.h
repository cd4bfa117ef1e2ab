// The linear layers of the device forward pass through cuBLAS: y = x · Wᵀ (+ y), the twin of
// kernels/cpu/packed_linear.h. Plain C++ header (cuBLAS and CUDA types stay in gemm.cc).
//
//   x: [rows][in] row-major (row stride x_stride), fp32, bf16 or fp16
//   W: [out][in]  row-major (checkpoint layout), same dtype as x
//   y: [rows][out] fp32 (row stride y_stride); accumulate: y += x·Wᵀ, else y = x·Wᵀ
//
// cuBLAS is column-major, so this is C(out x rows) = op(A) · B with A = W read as a
// column-major [in][out] matrix and transposed (lda = in), B = x read as column-major
// [in][rows] (ldb = x_stride), C = y (ldc = y_stride). Accumulation is fp32 in both dtypes;
// fp32 inputs use CUBLAS_COMPUTE_32F_PEDANTIC, so TF32 tensor cores are never used for them
// (the parity tests rely on it), bf16 inputs use the tensor cores with fp32 accumulation.
// Skinny bf16 products (at most kMaxGemvRows rows: decode at small batch) go to GemvBf16
// instead (gemv_bf16.h), which streams the weights closer to copy bandwidth.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kvserve::kernels::cuda {

// kFp16 only where a caller says so (the quantized paths, quant_linear.h); the model runs bf16.
enum class GemmDtype { kFp32, kBf16, kFp16 };

class CublasGemm {
 public:
  // A cuBLAS handle bound to `stream` (a cudaStream_t) on the current device.
  static absl::StatusOr<std::unique_ptr<CublasGemm>> Create(void* stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  absl::Status SetStream(void* stream);
  // The cudaStream_t the handle runs on (null: the legacy default stream).
  void* stream() const;
  absl::Status Linear(GemmDtype dtype, const void* x, int64_t x_stride, const void* w, float* y, int64_t y_stride,
                      int64_t rows, int in, int out, bool accumulate);

 private:
  explicit CublasGemm(void* handle) : handle_(handle) {}
  void* handle_;  // cublasHandle_t
};

}  // namespace kvserve::kernels::cuda
