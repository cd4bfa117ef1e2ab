// KV precision on the CPU: quantize one K or V head vector ("row", head_dim floats) into a
// paged-cache slot on write, and dequantize rows back to float inside attention.
//
// Storage per (block, K|V, head) run, as in cache/kv_layout.h:
//
//   data:   [block_size][head_dim]  elements of the KV dtype
//   scales: [block_size]            float, one per (token, head); fp8_e4m3 and int8 only
//
//   dtype     bytes  encoding                                  scale
//   fp32      4      IEEE binary32                             -
//   fp16      2      IEEE binary16, round-to-nearest-even,     -
//                    overflow -> inf
//   bf16      2      top half of binary32, round-to-nearest-   -
//                    even, NaN kept quiet
//   fp8_e4m3  1      OCP E4M3 "fn" (bias 7, no inf, S.1111.111 max|x| / 448 (x/scale lands in
//                    is NaN, max 448), RNE, saturating         [-448, 448]; 0 for an all-zero row)
//   int8      1      symmetric, round-to-nearest-even,         max|x| / 127
//                    clamped to [-127, 127]
//
// Inputs are assumed finite: a K/V vector holding inf or NaN is already a broken forward
// pass, and the scaled formats have no way to represent it next to finite values.
// Measured attention-output error of every dtype against fp32: docs/kv_precision.md.
//
// Pure functions of their arguments: no state, no allocation, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"
#include "config/config.h"

namespace kvserve::kernels::cpu {

// ---------------------------------------------------------------- scalar conversions
uint16_t FloatToHalf(float x);        // RNE; |x| >= 65520 -> +-inf
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float x);        // RNE
float Bf16ToFloat(uint16_t b);
uint8_t FloatToFp8E4M3(float x);      // RNE, saturates to +-448
float Fp8E4M3ToFloat(uint8_t b);

// Largest finite magnitude of E4M3 and of the symmetric int8 code.
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kInt8Max = 127.0f;

// ---------------------------------------------------------------- rows
// Quantizes `head_dim` floats from `src` into `dst` (head_dim * KvDtypeBytes(dtype) bytes).
// For fp8_e4m3 and int8 it also writes the row's scale to `*scale`; other dtypes ignore
// `scale` (it may be null).
void QuantizeRow(const float* src, int head_dim, config::KvDtype dtype, std::byte* dst,
                 float* scale);

// Inverse of QuantizeRow: `head_dim` floats into `dst`. `scale` points at the row's scale for
// the scaled dtypes and is ignored otherwise. This sits in the attention kernel's inner loop:
// one switch per row, then a branch-free loop the compiler can vectorize.
void DequantizeRow(const std::byte* src, const float* scale, int head_dim, config::KvDtype dtype,
                   float* dst);

// `num_rows` consecutive rows (a [num_rows][head_dim] run, with `num_rows` consecutive
// scales): the shape of one (block, K|V, head) run of the paged layout.
void DequantizeRows(const std::byte* src, const float* scales, int num_rows, int head_dim,
                    config::KvDtype dtype, float* dst);

// ---------------------------------------------------------------- paged-layout addressing
// Writes one token's K (kv = 0) or V (kv = 1) vector of one KV head into the slot
// (block, offset) of one layer's storage. `layer_data` / `layer_scales` are the layer's base
// pointers (KvStorage::layer_data / layer_scales); `layer_scales` may be null for unscaled
// dtypes.
void WriteKvRow(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
                int64_t block, int kv, int head, int offset, const float* src);

// Reads (dequantizes) the same row back into `dst` (head_dim floats).
void ReadKvRow(const cache::KvLayout& layout, const std::byte* layer_data,
               const float* layer_scales, int64_t block, int kv, int head, int offset, float* dst);

}  // namespace kvserve::kernels::cpu
