#include "kernels/cpu/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace kvserve::kernels::cpu {
namespace {

// Work below which one thread is faster than waking the team (multiply-adds; 2^18 is
// ~30 us of single-core sgemm, well above a fork/join even on a busy machine).
constexpr int64_t kParallelMacs = 1 << 18;
// Slices are whole multiples of this many output features (keeps sgemm/sgemv panels whole).
constexpr int kSliceAlign = 16;

void LinearSlice(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
                 int64_t y_stride, int64_t rows, int in_features, int begin, int end,
                 bool accumulate) {
  const int n = end - begin;
  if (n <= 0) return;
  const float* w_slice = w + static_cast<int64_t>(begin) * in_features;
  float* y_slice = y + begin;
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias != nullptr && !accumulate) {
    // Start from the bias and let the GEMM add onto it.
    for (int64_t r = 0; r < rows; ++r) std::copy(bias + begin, bias + end, y_slice + r * y_stride);
    beta = 1.0f;
  }
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, in_features, 1.0f, w_slice, in_features, x, 1, beta,
                y_slice, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), n, in_features,
                1.0f, x, static_cast<int>(x_stride), w_slice, in_features, beta, y_slice,
                static_cast<int>(y_stride));
  }
  if (bias != nullptr && accumulate) {
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y_slice + r * y_stride;
      for (int i = 0; i < n; ++i) yr[i] += bias[begin + i];
    }
  }
}

}  // namespace

int SetComputeThreads(int threads) {
  const int n = threads > 0 ? threads : omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
  return n;
}

void Linear(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
            int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  if (rows <= 0 || out_features <= 0) return;
  const int64_t macs = rows * in_features * static_cast<int64_t>(out_features);
  const int max_threads = omp_get_max_threads();
  if (max_threads == 1 || macs < kParallelMacs || out_features < 2 * kSliceAlign) {
    LinearSlice(x, x_stride, w, bias, y, y_stride, rows, in_features, 0, out_features, accumulate);
    return;
  }
  const int units = (out_features + kSliceAlign - 1) / kSliceAlign;
  const int parts = std::min(max_threads, units);
#pragma omp parallel num_threads(parts)
  {
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int begin = std::min(out_features, units * t / nt * kSliceAlign);
    const int end = std::min(out_features, units * (t + 1) / nt * kSliceAlign);
    LinearSlice(x, x_stride, w, bias, y, y_stride, rows, in_features, begin, end, accumulate);
  }
}

}  // namespace kvserve::kernels::cpu
