// RMSNorm over rows of a row-major matrix (Llama / Qwen2 flavour: the weight multiplies the
// normalised value, no bias, no mean subtraction):
//
//   out[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * weight[i]
//
// fp32 in and out; the sum of squares is accumulated in fp32 like the reference
// implementations (HF computes it in fp32 for fp32 and half models alike). In-place use
// (out == x with equal strides) is allowed.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu {

// x:      [rows][x_stride]   (first `dim` floats of each row are used)
// weight: [dim]
// out:    [rows][out_stride]
// Runs on the calling thread's compute team (compute_pool.h) (parallel over rows when there are many).
void RmsNorm(const float* x, int64_t x_stride, const float* weight, float* out,
             int64_t out_stride, int64_t rows, int dim, float eps);

}  // namespace kvserve::kernels::cpu
