// Gated activations of the MLP on a fused gate/up projection:
//
//   gate_up row: [ gate_0 .. gate_{n-1} | up_0 .. up_{n-1} ]      (n = intermediate size)
//   SwiGLU (Llama):  out[i] = silu(gate_i) * up_i,   silu(g) = g / (1 + exp(-g))
//   GeGLU (Gemma):   out[i] = gelu_tanh(gate_i) * up_i,
//                    gelu_tanh(g) = g / 2 * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 g^3)))
//                    (Hugging Face's gelu_pytorch_tanh), through tanh(z) = 1 - 2 / (1 + e^{2z})
//
// The fused layout lets one GEMM produce both halves (weights are stacked at load time).
// exp is the kernels' own polynomial (relative error < 3e-7, simd.h), not libm's.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu {

// gate_up: [rows][2 * inter]
// out:     [rows][inter]
void SiluMul(const float* gate_up, int64_t rows, int inter, float* out);
void GeluTanhMul(const float* gate_up, int64_t rows, int inter, float* out);

}  // namespace kvserve::kernels::cpu
