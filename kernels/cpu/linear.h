// Dense linear layer on OpenBLAS, parallelised by this library (not by OpenBLAS). The model
// runs on packed_linear.h since issue 14; this stays as the OpenBLAS baseline that
// bench/linear_bench.cc measures the packed kernels against:
//
//   y[rows][out] = x[rows][in] · w[out][in]ᵀ + bias[out]          (accumulate = false)
//   y[rows][out] += x[rows][in] · w[out][in]ᵀ + bias[out]         (accumulate = true)
//
//            out_features
//   w:  ┌──────┬──────┬───┐   the output features are cut into one contiguous slice per
//       │ c0   │ c1   │ … │   chunk of the team (compute_pool.h); each chunk runs single-
//       └──────┴──────┴───┘   threaded sgemm (or sgemv for one row) on its slice of w and y.
//
// Chunks depend on the shape only, never on the thread count, so results do not either.
// NOTE: one thread pool. OpenBLAS (pthread build) would otherwise start its own workers,
// which compete with the team for the same cores; SetComputeThreads (compute_pool.h) pins
// OpenBLAS to one thread and sizes the team.
// `accumulate` turns the residual add into the GEMM's beta = 1 at no extra pass.
#pragma once

#include <cstdint>

#include "kernels/cpu/compute_pool.h"  // SetComputeThreads

namespace kvserve::kernels::cpu {

// x:    [rows][x_stride]   (first in_features floats of each row)
// w:    [out_features][in_features]   row-major, contiguous
// bias: [out_features] or nullptr
// y:    [rows][y_stride]   (first out_features floats of each row)
void Linear(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
            int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);

}  // namespace kvserve::kernels::cpu
