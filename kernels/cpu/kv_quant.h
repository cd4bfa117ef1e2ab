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
//   int4      1/2    asymmetric: x ~ min + code * step,        (step, min) per group as two
//                    code in [0, 15], two codes per byte        fp16 packed in one float slot
//                    (element i: byte i/2, low nibble if even)  (step low, min high half);
//                                                               min rounded down and step up
//                                                               so [min, min + 15 step] covers
//                                                               the group. K: per channel over
//                                                               the block's rows; V: per row,
//                                                               per KvLayout::int4_group elements
//
// int4 assumes |x| < 65504 (fp16's range), as the fp16 cache does.
// int4 keys (KIVI's per-channel keys): a run's scales are one packed slot per channel.
// Rows are written one step at a time, so a channel's range grows as rows arrive: a new row
// outside [min, min + 15 step] widens it and the rows already in the block are re-encoded
// from their dequantized values (WriteInt4ChannelRows). A row thus picks up at most half a
// step of the final range per widening after it was written; writing a whole block at once
// (prefill, compaction) encodes it once with the exact range. int4 values: a row's scales
// are one packed slot per group.
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
// `scale` (it may be null). int4 here is one group over the whole row, (step, min) into
// *scale (packed); the paged cache's int4 layouts go through WriteKvRows.
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

// ---------------------------------------------------------------- int4
inline constexpr int kInt4MaxCode = 15;

// A group's decode parameters: x ~ min + code * step; `packed` is the scale slot holding both
// as fp16 (step in the low 16 bits, min in the high).
struct Int4Range {
  float step = 0.0f;
  float min = 0.0f;
  float packed = 0.0f;
};
// The fp16-representable range for values in [lo, hi]: min <= lo (one fp16 step below at
// most) and min + 15 * step >= hi (step rounded up).
Int4Range MakeInt4Range(float lo, float hi);
Int4Range UnpackInt4Scale(float packed);

// One row of `head_dim` values in groups of `group` elements (the last may be shorter):
// codes into dst ((head_dim + 1) / 2 bytes), one packed (step, min) per group into scales.
void QuantizeInt4Row(const float* src, int head_dim, int group, std::byte* dst, float* scales);
// `num_rows` consecutive rows of int4 V codes (row stride (head_dim + 1) / 2 bytes, scale
// stride `groups`).
void DequantizeInt4Rows(const std::byte* src, const float* scales, int num_rows, int head_dim, int group,
                        float* dst);

// int4 keys, per channel over one (block, head) run. run: [block_size][(head_dim + 1) / 2]
// codes; scales: [head_dim] packed (step, min). Writes rows [first_row, first_row + n)
// from src ([n] rows, src_stride floats apart); rows [0, first_row) must hold valid codes
// (first_row == 0 starts the block afresh). Returns the number of channels widened (rows
// already there re-encoded).
int WriteInt4ChannelRows(std::byte* run, float* scales, int head_dim, int first_row, int num_rows,
                         const float* src, int64_t src_stride);
void DequantizeInt4ChannelRows(const std::byte* run, const float* scales, int head_dim, int first_row,
                               int num_rows, float* dst);

// ---------------------------------------------------------------- paged-layout addressing
// Rows [first, first + n) of the (block, kv, head) run whose data starts at `run` and whose
// scales start at `run_scales` (layout.run_byte_offset / run_scale_offset), dequantized into
// dst: [n][layout.side_dim(kv)] (head_dim, or key_rank for a low-rank tier's K). Every dtype, K or V.
void DequantizeRun(const cache::KvLayout& layout, int kv, const std::byte* run, const float* run_scales,
                   int first, int n, float* dst);

// Writes `n` consecutive slots [offset, offset + n) of one block (same block, kv, head) from
// src ([n] rows, src_stride floats apart); rows [0, offset) of the block must be valid (for
// int4 keys, whose scales span the block).
void WriteKvRows(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales, int64_t block,
                 int kv, int head, int offset, int n, const float* src, int64_t src_stride);

// Writes one token's K (kv = 0) or V (kv = 1) vector of one KV head into the slot
// (block, offset) of one layer's storage. `layer_data` / `layer_scales` are the layer's base
// pointers (KvStorage::layer_data / layer_scales); `layer_scales` may be null for unscaled
// dtypes.
void WriteKvRow(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
                int64_t block, int kv, int head, int offset, const float* src);

// Reads (dequantizes) the same row back into `dst` (layout.side_dim(kv) floats).
void ReadKvRow(const cache::KvLayout& layout, const std::byte* layer_data,
               const float* layer_scales, int64_t block, int kv, int head, int offset, float* dst);

}  // namespace kvserve::kernels::cpu
