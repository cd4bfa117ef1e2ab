#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <algorithm>

namespace kvserve::kernels::cpu {
namespace {

// Slices are whole multiples of this many output features (keeps sgemm/sgemv panels whole).
constexpr int kSliceAlign = 16;
// Work per chunk (multiply-adds) and the most chunks one call is cut into.
constexpr int64_t kChunkMacs = 1 << 16;
constexpr int kMaxChunks = 32;

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

void Linear(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
            int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  if (rows <= 0 || out_features <= 0) return;
  const int64_t macs = rows * in_features * static_cast<int64_t>(out_features);
  const int units = (out_features + kSliceAlign - 1) / kSliceAlign;
  // Fixed cut: enough chunks that a late or descheduled worker leaves little for the caller
  // to wait on, each still big enough to amortise its sgemm call.
  const int64_t chunks = std::clamp<int64_t>(macs / kChunkMacs, 1, std::min(units, kMaxChunks));
  ParallelFor(chunks, SplitFor(macs), [&](int64_t c, int) {
    const int begin = static_cast<int>(std::min<int64_t>(out_features, units * c / chunks * kSliceAlign));
    const int end = static_cast<int>(std::min<int64_t>(out_features, units * (c + 1) / chunks * kSliceAlign));
    LinearSlice(x, x_stride, w, bias, y, y_stride, rows, in_features, begin, end, accumulate);
  });
}

}  // namespace kvserve::kernels::cpu
