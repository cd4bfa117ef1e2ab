// FP8 e4m3 W8A8 linear layers: y = (a_scale · w_scale) · (x_fp8 · W_fp8ᵀ) (+ y) through
// cuBLASLt, fp32 accumulation and output, per-tensor scales read by cuBLASLt from device
// pointers (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER), so a dynamic activation scale never
// round-trips to the host. Plain C++ header (cuBLASLt and CUDA types stay in fp8_gemm.cu).
//
//   x_fp8: [rows][in] e4m3 bytes, row stride x_stride      (FP8 tensor cores: sm_89 and up;
//   W_fp8: [out][in]  e4m3 bytes (checkpoint layout)        this build's own kernels are sm_90)
//   y:     [rows][out] fp32, row stride y_stride
//
// cuBLASLt's FP8 GEMMs want the "TN" form: with column-major eyes W is [in][out] and taken
// transposed (A, lda = in), x is [in][rows] (B, ldb = x_stride), D = y (ldd = y_stride); in,
// out, x_stride and y_stride multiples of 16, pointers 16-byte aligned.
//
// Also here: the dynamic per-tensor activation quantizer (scale = max|x| / 448, the e4m3
// maximum) and, for checkpoints with 128x128 block scales (DeepSeek-V3 / Qwen FP8,
// `weight_scale_inv`) or per-channel weight scales, a dequantize-to-bf16 kernel: those take the
// dequantize-then-cuBLAS path (CublasGemm bf16), not an FP8 GEMM; cuBLASLt's block-scale and
// outer-vector scale modes are left for when a device can verify them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/gemm.h"

namespace kvserve::kernels::cuda {

inline constexpr float kFp8E4m3Max = 448.0f;

class Fp8Gemm {
 public:
  // Refuses (FailedPrecondition, naming the device and its compute capability) a GPU below
  // sm_89, which has no FP8 tensor cores. Allocates a 32 MiB cuBLASLt workspace.
  static absl::StatusOr<std::unique_ptr<Fp8Gemm>> Create(void* stream);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  void SetStream(void* stream) { stream_ = stream; }

  // x_scale, w_scale: device pointers to one fp32 each (the dequantization multipliers).
  absl::Status Linear(const uint8_t* x_fp8, int64_t x_stride, const float* x_scale,
                      const uint8_t* w_fp8, const float* w_scale, float* y, int64_t y_stride,
                      int64_t rows, int in, int out, bool accumulate);

 private:
  Fp8Gemm(void* handle, void* workspace, void* stream)
      : handle_(handle), workspace_(workspace), stream_(stream) {}
  void* handle_;     // cublasLtHandle_t
  void* workspace_;  // kWorkspaceBytes of device memory
  void* stream_;     // cudaStream_t
};

// Dynamic per-tensor quantization of x ([rows][in], bf16 or fp16, row stride x_stride) to e4m3:
// *scale (device fp32) = max|x| / 448 (1 when x is all zeros), x_fp8[r][i] (row stride in) =
// e4m3(x[r][i] / *scale), round to nearest even, saturating to ±448. Three launches on
// `stream`; returns 0 or a cudaError_t value.
int QuantizeFp8PerTensor(GemmDtype act, const void* x, int64_t x_stride, int64_t rows, int in,
                         uint8_t* x_fp8, float* scale, void* stream);

// dst[o][i] (bf16, round to nearest even) = e4m3(w[o][i]) · scales[o / block_out][i / block_in],
// scales fp32 row-major [ceil(out/block_out)][ceil(in/block_in)]: block 128x128 for
// DeepSeek-V3 / Qwen FP8 (`weight_scale_inv`: the checkpoint multiplies, despite the name),
// (1, in) for per-channel and (out, in) for per-tensor weight scales (compressed-tensors).
// The dequantize-then-cuBLAS fallback for the scale shapes Fp8Gemm does not take. Returns 0 or
// a cudaError_t value.
int DequantizeFp8Scaled(const uint8_t* w, const float* scales, int out, int in, int block_out,
                        int block_in, uint16_t* dst, void* stream);

}  // namespace kvserve::kernels::cuda
