// Dense linear layer on OpenBLAS, parallelised by this library (not by OpenBLAS):
//
//   y[rows][out] = x[rows][in] · w[out][in]ᵀ + bias[out]          (accumulate = false)
//   y[rows][out] += x[rows][in] · w[out][in]ᵀ + bias[out]         (accumulate = true)
//
//            out_features
//   w:  ┌──────┬──────┬───┐   the output features are cut into one contiguous slice per
//       │ t0   │ t1   │ … │   OpenMP thread; each thread runs single-threaded sgemm (or
//       └──────┴──────┴───┘   sgemv for one row) on its slice of w and of y.
//
// NOTE: one thread pool. OpenBLAS (pthread build) would otherwise start its own workers,
// which compete with the OpenMP team for the same cores (OpenMP workers spin between
// regions); SetComputeThreads pins OpenBLAS to one thread and sizes the OpenMP team.
// `accumulate` turns the residual add into the GEMM's beta = 1 at no extra pass.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu {

// Sets the OpenMP team size for parallel regions started by the calling thread (0: all
// cores) and puts OpenBLAS in single-threaded mode. Returns the team size in effect.
// Call it on the thread that will run the kernels (it is cheap to call per step).
int SetComputeThreads(int threads);

// x:    [rows][x_stride]   (first in_features floats of each row)
// w:    [out_features][in_features]   row-major, contiguous
// bias: [out_features] or nullptr
// y:    [rows][y_stride]   (first out_features floats of each row)
void Linear(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
            int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);

}  // namespace kvserve::kernels::cpu
