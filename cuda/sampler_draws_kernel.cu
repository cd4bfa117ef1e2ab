// Device side of sampler_draws.h. Kept free of Abseil and of anything but the RNG header, so
// nvcc compiles only what the kernel needs.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sampler_draws.h"
#include "model/sampler_rng.h"

namespace kvserve::cuda {
namespace {

__global__ void UniformDrawsKernel(const DrawRow* rows, int num_rows, int draws, double* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= num_rows) return;
  model::SamplerRng rng = model::TokenRng(rows[i].seed, rows[i].token_index, rows[i].sample_index);
  for (int d = 0; d < draws; ++d) out[static_cast<int64_t>(i) * draws + d] = rng.Uniform();
}

}  // namespace

// Returns a cudaError_t as int so the .cc wrapper needs no CUDA header of its own.
int LaunchUniformDraws(const DrawRow* host_rows, int num_rows, int draws, double* host_out) {
  DrawRow* d_rows = nullptr;
  double* d_out = nullptr;
  const size_t out_count = static_cast<size_t>(num_rows) * static_cast<size_t>(draws);
  cudaError_t err = cudaMalloc(&d_rows, sizeof(DrawRow) * static_cast<size_t>(num_rows));
  if (err == cudaSuccess) err = cudaMalloc(&d_out, sizeof(double) * out_count);
  if (err == cudaSuccess) {
    err = cudaMemcpy(d_rows, host_rows, sizeof(DrawRow) * static_cast<size_t>(num_rows), cudaMemcpyHostToDevice);
  }
  if (err == cudaSuccess) {
    const int threads = 128;
    UniformDrawsKernel<<<(num_rows + threads - 1) / threads, threads>>>(d_rows, num_rows, draws, d_out);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(host_out, d_out, sizeof(double) * out_count, cudaMemcpyDeviceToHost);
  cudaFree(d_rows);
  cudaFree(d_out);
  return static_cast<int>(err);
}

}  // namespace kvserve::cuda
