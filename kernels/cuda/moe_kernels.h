// The row shuffles of the device mixture-of-experts layer (cuda/cuda_moe_layer.h), twins of
// the loops in model/moe_layer.cc. Plain C++ header: device pointers, the stream is a
// cudaStream_t passed as void*, each call returns 0 or a cudaError_t value (launch errors).
//
//   kernel       CPU twin (model/moe_layer.cc)                        match
//   GatherRows   xg[r] = h[row_token[r]] (memcpy per grouped row)      bit-exact
//   MoeCombine   x[t] += sum_j weight[t][j] * y[slot_row[t k + j]]     bit-exact (same order:
//                                                                      j ascending, no FMA)
//   ClampedSwiglu  kernels/cpu/clamped_swiglu.h (gpt-oss)              expf vs std::exp: a few ulp
#pragma once

#include <cstdint>

namespace kvserve::kernels::cuda {

// out[r][0, cols) = x[row_token[r]][0, cols) for r in [0, rows); elements of elem_bytes (2:
// bf16 codes, 4: fp32). x row stride x_stride elements; out rows dense (stride cols).
int GatherRows(const void* x, int64_t x_stride, int elem_bytes, const int32_t* row_token,
               int64_t rows, int cols, void* out, void* stream);

// x[t][i] += sum over j < top_k (ascending) of weights[t top_k + j] * y[slot_row[t top_k + j]][i],
// for t < rows and i < cols; y rows dense (stride cols), x row stride x_stride.
int MoeCombine(const float* y, int cols, const int32_t* slot_row, const float* weights,
               int64_t rows, int top_k, float* x, int64_t x_stride, void* stream);

// gpt-oss's activation on [rows][2 inter] gate | up rows: out[r][i] = (u + 1) g sigmoid(alpha g),
// g = min(gate, limit), u = clamp(up, -limit, limit); out [rows][inter] fp32, or bf16 codes
// (the value ToBf16 gives) with the Bf16 variant.
int ClampedSwiglu(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                  float* out, void* stream);
int ClampedSwigluBf16(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                      uint16_t* out, void* stream);

}  // namespace kvserve::kernels::cuda
