// The element-wise pieces Gemma 2 / Gemma 3 add to the Llama forward pass on a CUDA device,
// each the twin of the CPU loop named beside it (model/llama_model.cc, kernels/cpu/swiglu.h).
// Plain C++ header: device pointers, the stream is a cudaStream_t passed as void*, each call
// returns 0 or a cudaError_t value (launch errors only).
//
//   kernel           CPU twin                                   match
//   GeluTanhMul      kernels/cpu/swiglu.h GeluTanhMul           expf vs the CPU's polynomial
//                                                               exp: a few ulp
//   ScaleRows        x *= s (the embedding's sqrt(hidden))      bit-exact
//   AddRows          x += y (the sandwich norms' residual add)  bit-exact
//   SoftcapLogits    cap * tanh(logit / cap) (final soft-cap)   tanhf vs std::tanh: a few ulp
#pragma once

#include <cstdint>

namespace kvserve::kernels::cuda {

// out[r][i] = gelu_tanh(gate_up[r][i]) * gate_up[r][inter + i]; out [rows][inter] fp32, or bf16
// codes (the value ToBf16 gives) with the Bf16 variant.
int GeluTanhMul(const float* gate_up, int64_t rows, int inter, float* out, void* stream);
int GeluTanhMulBf16(const float* gate_up, int64_t rows, int inter, uint16_t* out, void* stream);

// x[r][c] *= s for r < rows, c < cols (row stride x_stride).
int ScaleRows(float* x, int64_t x_stride, int64_t rows, int cols, float s, void* stream);

// x[r][c] += y[r][c] (row strides x_stride, y_stride).
int AddRows(float* x, int64_t x_stride, const float* y, int64_t y_stride, int64_t rows, int cols,
            void* stream);

// logits[r][c] = cap * tanh(logits[r][c] / cap), row stride `stride`.
int SoftcapLogits(float* logits, int64_t stride, int64_t rows, int cols, float cap, void* stream);

}  // namespace kvserve::kernels::cuda
