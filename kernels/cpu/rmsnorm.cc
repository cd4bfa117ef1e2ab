#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/compute_pool.h"

namespace kvserve::kernels::cpu {
namespace {

void RmsNormRow(const float* x, const float* weight, float* out, int dim, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
#pragma omp simd
  for (int i = 0; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

// Below this many elements a parallel region costs more than it saves (a decode row of a
// 4k-wide model is ~2 us of work).
constexpr int64_t kParallelElems = 1 << 15;

}  // namespace

void RmsNorm(const float* x, int64_t x_stride, const float* weight, float* out,
             int64_t out_stride, int64_t rows, int dim, float eps) {
  if (rows < 2 || rows * dim < kParallelElems) {
    for (int64_t r = 0; r < rows; ++r) RmsNormRow(x + r * x_stride, weight, out + r * out_stride, dim, eps);
    return;
  }
  constexpr int64_t kChunkRows = 8;
  ParallelFor((rows + kChunkRows - 1) / kChunkRows, true, [&](int64_t chunk, int) {
    for (int64_t r = chunk * kChunkRows; r < std::min(rows, (chunk + 1) * kChunkRows); ++r) {
      RmsNormRow(x + r * x_stride, weight, out + r * out_stride, dim, eps);
    }
  });
}

}  // namespace kvserve::kernels::cpu
