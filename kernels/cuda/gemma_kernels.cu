#include "kernels/cuda/gemma_kernels.h"

#include <cuda_runtime.h>

#include "kernels/cuda/kv_codes.cuh"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
int LastError() { return static_cast<int>(cudaGetLastError()); }

// As the CPU: gelu_tanh(g) = g / (1 + e^{-2z}), z = sqrt(2/pi) (g + 0.044715 g^3), with
// e^{-2|z|} so nothing overflows.
template <typename Out>
__global__ void GeluTanhMulKernel(const float* gate_up, int64_t rows, int inter, Out* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * inter) return;
  const int64_t r = i / inter;
  const int64_t c = i - r * inter;
  const float g = gate_up[r * 2 * inter + c];
  const float u = gate_up[r * 2 * inter + inter + c];
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float g3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
  const float z2 = __fmul_rn(2.0f * kSqrt2OverPi, __fadd_rn(g, g3));
  const float t = expf(z2 < 0.0f ? z2 : -z2);
  const float gelu = __fdiv_rn(z2 < 0.0f ? __fmul_rn(g, t) : g, __fadd_rn(1.0f, t));
  StoreAs(out, i, __fmul_rn(gelu, u));
}

__global__ void ScaleRowsKernel(float* x, int64_t x_stride, int64_t rows, int cols, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  x[r * x_stride + c] = __fmul_rn(x[r * x_stride + c], s);
}

__global__ void AddRowsKernel(float* x, int64_t x_stride, const float* y, int64_t y_stride,
                              int64_t rows, int cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  x[r * x_stride + c] = __fadd_rn(x[r * x_stride + c], y[r * y_stride + c]);
}

__global__ void SoftcapKernel(float* logits, int64_t stride, int64_t rows, int cols, float cap) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  float& v = logits[r * stride + c];
  v = __fmul_rn(cap, tanhf(__fdiv_rn(v, cap)));
}

template <typename Out>
int LaunchGelu(const float* gate_up, int64_t rows, int inter, Out* out, void* stream) {
  if (rows * inter == 0) return 0;
  GeluTanhMulKernel<<<GridFor(rows * inter), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      gate_up, rows, inter, out);
  return LastError();
}

}  // namespace

int GeluTanhMul(const float* gate_up, int64_t rows, int inter, float* out, void* stream) {
  return LaunchGelu(gate_up, rows, inter, out, stream);
}

int GeluTanhMulBf16(const float* gate_up, int64_t rows, int inter, uint16_t* out, void* stream) {
  return LaunchGelu(gate_up, rows, inter, out, stream);
}

int ScaleRows(float* x, int64_t x_stride, int64_t rows, int cols, float s, void* stream) {
  if (rows * cols == 0) return 0;
  ScaleRowsKernel<<<GridFor(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, x_stride, rows, cols, s);
  return LastError();
}

int AddRows(float* x, int64_t x_stride, const float* y, int64_t y_stride, int64_t rows, int cols,
            void* stream) {
  if (rows * cols == 0) return 0;
  AddRowsKernel<<<GridFor(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, x_stride, y, y_stride, rows, cols);
  return LastError();
}

int SoftcapLogits(float* logits, int64_t stride, int64_t rows, int cols, float cap, void* stream) {
  if (rows * cols == 0) return 0;
  SoftcapKernel<<<GridFor(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, stride, rows, cols, cap);
  return LastError();
}

}  // namespace kvserve::kernels::cuda
