// gpt-oss's expert activation (transformers' GptOssExperts, the model card's "SwiGLU with
// clamping and a residual connection") on a gate | up row, the layout of swiglu.h:
//
//   g = min(gate_i, limit)          (gate clamped from above only)
//   u = clamp(up_i, -limit, limit)
//   out[i] = (u + 1) · g · sigmoid(alpha · g),   sigmoid(v) = 1 / (1 + exp(-v))
//
// gpt-oss stores gate and up interleaved; the loader de-interleaves them
// (model/fused_expert_reader.h), so this kernel sees the same layout as SiluMul. exp is libm's
// expf: the activation is a small share of an expert's work next to its two GEMMs.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu {

// gate_up: [rows][2 * inter]; out: [rows][inter].
void ClampedSwiglu(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                   float* out);

}  // namespace kvserve::kernels::cpu
