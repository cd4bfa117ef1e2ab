// The element-wise and row-wise kernels of the Llama forward pass on a CUDA device, each the
// twin of a kernels/cpu function (named beside it). Plain C++ header: pointers are device
// pointers, the stream is a cudaStream_t passed as void*, and every call returns 0 or a
// cudaError_t value (launch errors only; the kernels run asynchronously on `stream`).
//
//   kernel            CPU twin                          match
//   EmbeddingGather   memcpy of embed rows (llama_model) bit-exact
//   RmsNorm           kernels/cpu/rmsnorm.h              fp32 sum order differs (~1e-6 rel)
//   HeadRmsNorm       llama_model.cc HeadNorm            as RmsNorm
//   ApplyRope         kernels/cpu/rope.h ApplyRope       bit-exact (same table, no FMA)
//   WriteKv           kernels/cpu/kv_write.h + kv_quant  codes and scales bit-exact
//   SiluMul           kernels/cpu/swiglu.h               expf vs std::exp: <= 2 ulp
//   AddBias, ToBf16   -                                  bit-exact (ToBf16 is RNE as FloatToBf16)
//   RmsNormBf16,      ToBf16 of RmsNorm / SiluMul        bit-exact (the same value, rounded once)
//   SiluMulBf16
//   GreedySample      model::Sampler greedy branch       token exact (first max); logprob to
//                                                        double-sum order (~1e-7 abs)
//
// ApplyRope takes the cos/sin table from the host (kernels::cpu::RopeCosSin, computed per step
// from the model's own inverse frequencies), so both backends rotate with identical angles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"

namespace kvserve::kernels::cuda {

// out[r][:] = embed[token_ids[r]][:], dim floats per row.
int EmbeddingGather(const float* embed, int dim, const int32_t* token_ids, int64_t rows, float* out, void* stream);

// out[r] = x[src_row(r)] * rsqrt(mean(x^2) + eps) * weight, src_row(r) = rows_index[r] (or r
// when rows_index is null). `out` may equal `x` only when rows_index is null.
int RmsNorm(const float* x, int64_t x_stride, const int32_t* rows_index, const float* weight, float* out,
            int64_t out_stride, int64_t rows, int dim, float eps, void* stream);
// The same, writing bf16 codes (exactly ToBf16 of RmsNorm's output): a bf16 GEMM's input.
int RmsNormBf16(const float* x, int64_t x_stride, const int32_t* rows_index, const float* weight, uint16_t* out,
                int64_t out_stride, int64_t rows, int dim, float eps, void* stream);

// Per-head RMSNorm in place (Qwen3's q_norm / k_norm before RoPE): for each of `rows` rows
// (stride row_stride), the `heads` heads of head_dim floats at x's start are each normalised
// and scaled by weight [head_dim]. Twin of model/llama_model.cc HeadNorm (RmsNorm's match).
int HeadRmsNorm(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim, const float* weight, float eps,
                void* stream);

// Rotates num_heads heads of head_dim at the start of each row (rotate_half layout), in place:
// the first rotary_dim dims of each head, pairs (f, f + rotary_dim / 2) (Phi-4-mini's partial
// rotary; 0: head_dim). cos_sin: [rows][rotary_dim] (cos in [0, rd/2), sin in [rd/2, rd)).
int ApplyRope(float* x, int64_t rows, int num_heads, int head_dim, int64_t row_stride, const float* cos_sin,
              void* stream, int rotary_dim = 0);

// Quantizes K and V of every row with slot_mapping[r] >= 0 into the paged layer arrays.
// k, v: [rows][kv_stride], num_kv_heads * head_dim floats each at their start.
int WriteKv(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales, const float* k, const float* v,
            int64_t kv_stride, const int64_t* slot_mapping, int64_t rows, void* stream);

// out[r][i] = silu(gate_up[r][i]) * gate_up[r][inter + i].
int SiluMul(const float* gate_up, int64_t rows, int inter, float* out, void* stream);
// The same, writing bf16 codes (exactly ToBf16 of SiluMul's output), row stride inter.
int SiluMulBf16(const float* gate_up, int64_t rows, int inter, uint16_t* out, void* stream);

// y[r][c] += bias[c] for c < cols.
int AddBias(float* y, int64_t y_stride, const float* bias, int64_t rows, int cols, void* stream);

// out[r][c] = bf16(x[r][c]) (round to nearest even), out row stride = cols.
int ToBf16(const float* x, int64_t x_stride, int64_t rows, int cols, uint16_t* out, void* stream);

// Greedy: tokens[r] = first argmax of logits[r][:vocab]; logprobs[r] = logits[r][token] -
// logsumexp(logits[r]) (accumulated in double). One CTA per row.
int GreedySample(const float* logits, int64_t rows, int vocab, int32_t* tokens, float* logprobs, void* stream);
// The same with structured-output masks: row r with mask_index[r] >= 0 takes its argmax over
// the tokens whose bit is set in masks[mask_index[r] * mask_words ...] (bit i of word i / 64,
// mask_words * 64 >= vocab), as model::Sampler's `allowed`; when no allowed token is above
// -inf it returns id 0, as the CPU's max_element. The logprob stays that of the raw row.
// mask_index may be null (no masks).
int GreedySampleMasked(const float* logits, int64_t rows, int vocab, const int32_t* mask_index,
                       const uint64_t* masks, int mask_words, int32_t* tokens, float* logprobs, void* stream);

// Deterministic pseudo-random fill (benchmarks' random weights): out[i] = scale * u(i) + shift,
// u uniform in [-1, 1) from a hash of (seed, i). As fp32 or as bf16 codes.
int RandomFillF32(float* out, int64_t n, uint64_t seed, float scale, float shift, void* stream);
int RandomFillBf16(uint16_t* out, int64_t n, uint64_t seed, float scale, float shift, void* stream);

}  // namespace kvserve::kernels::cuda
