#include "kernels/cuda/moe_kernels.h"

#include <cuda_runtime.h>

#include "kernels/cuda/kv_codes.cuh"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void GatherRowsKernel(const T* x, int64_t x_stride, const int32_t* row_token,
                                 int64_t rows, int cols, T* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  out[i] = x[static_cast<int64_t>(row_token[r]) * x_stride + c];
}

__global__ void MoeCombineKernel(const float* y, int cols, const int32_t* slot_row,
                                 const float* weights, int64_t rows, int top_k, float* x,
                                 int64_t x_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t t = i / cols;
  const int64_t c = i - t * cols;
  // As the CPU: acc over the token's slots in routing order, each product and sum rounded.
  float acc = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    const int64_t s = t * top_k + j;
    acc = __fadd_rn(acc, __fmul_rn(weights[s], y[static_cast<int64_t>(slot_row[s]) * cols + c]));
  }
  x[t * x_stride + c] = __fadd_rn(x[t * x_stride + c], acc);
}

template <typename Out>
__global__ void ClampedSwigluKernel(const float* gate_up, int64_t rows, int inter, float limit,
                                    float alpha, Out* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * inter) return;
  const int64_t r = i / inter;
  const int64_t c = i - r * inter;
  const float* gu = gate_up + r * 2 * inter;
  const float g = fminf(gu[c], limit);
  const float u = fminf(fmaxf(gu[inter + c], -limit), limit);
  // As the CPU: (u + 1) * (g / (1 + exp(-alpha g))), each step rounded.
  const float sig = __fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(-alpha, g))));
  StoreAs(out, i, __fmul_rn(__fadd_rn(u, 1.0f), sig));
}

unsigned GridFor(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

int GatherRows(const void* x, int64_t x_stride, int elem_bytes, const int32_t* row_token,
               int64_t rows, int cols, void* out, void* stream) {
  const int64_t n = rows * cols;
  if (n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  if (elem_bytes == 2) {
    GatherRowsKernel<<<GridFor(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), x_stride,
                                                     row_token, rows, cols,
                                                     static_cast<uint16_t*>(out));
  } else {
    GatherRowsKernel<<<GridFor(n), kThreads, 0, s>>>(
        static_cast<const float*>(x), x_stride, row_token, rows, cols, static_cast<float*>(out));
  }
  return static_cast<int>(cudaGetLastError());
}

int MoeCombine(const float* y, int cols, const int32_t* slot_row, const float* weights,
               int64_t rows, int top_k, float* x, int64_t x_stride, void* stream) {
  const int64_t n = rows * cols;
  if (n == 0) return 0;
  MoeCombineKernel<<<GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      y, cols, slot_row, weights, rows, top_k, x, x_stride);
  return static_cast<int>(cudaGetLastError());
}

int ClampedSwiglu(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                  float* out, void* stream) {
  const int64_t n = rows * inter;
  if (n == 0) return 0;
  ClampedSwigluKernel<<<GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      gate_up, rows, inter, limit, alpha, out);
  return static_cast<int>(cudaGetLastError());
}

int ClampedSwigluBf16(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                      uint16_t* out, void* stream) {
  const int64_t n = rows * inter;
  if (n == 0) return 0;
  ClampedSwigluKernel<<<GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      gate_up, rows, inter, limit, alpha, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
