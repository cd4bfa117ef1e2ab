// What the CUDA benchmarks share: the median of repeated timings and the device's measured
// copy bandwidth, the reference every CUDA figure is stated against (issue 13).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvserve::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device cudaMemcpy of `bytes`: GB/s counting read + write, median of `reps` timed
// copies after one warm-up; 0 when the buffers cannot be allocated.
inline double DeviceCopyGbps(size_t bytes, int reps = 9) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    cudaGetLastError();
    return 0.0;
  }
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> gbps;
  for (int i = 0; i <= reps; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) gbps.push_back(2.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return Median(gbps);
}

}  // namespace kvserve::bench
