// Paged attention on a CUDA device: the twin of kernels/cpu/paged_attention.h, over the same
// paged layout (cache/kv_layout.h) and every KV dtype (fp32, fp16, bf16, fp8_e4m3 and int8 with
// per-row scales, int4 with per-channel key and per-group value scales; K and V each in its
// own dtype), for a batch that mixes prefill chunks and decode rows. Plain C++ header: no
// CUDA types (pointers are device pointers, the stream is a cudaStream_t passed as void*).
//
// Two kernels share the step (DevicePagedSeqs says which row goes where):
//
// Split-KV ("flash-decoding") for decode rows: each (query row, KV head) pair is cut into
// splits of `split_tokens` attended slots, so a few long decode rows still fill the GPU. Pass 1
// has two kernels: a vectorised one for the common shapes (split_kv_vec.cu, VecSplitCovers;
// 16-byte loads, several slots in flight per lane) and the general one below for every other
// dtype pair and head_dim.
//
//   pass 1  grid (row, kv head, split), 4 warps per CTA; the group's query heads (GQA) are
//           processed together so each K/V row is read once per group. A warp walks slots
//           split_begin + warp, + 4, ...; per slot: dequantize K, q·k for every head of the
//           group (warp-reduced), online softmax, accumulate dequantized V. The warps merge
//           their (max, sum, acc) in shared memory and write one partial per split.
//   pass 2  grid (row, head): merges the splits (log-sum-exp weights), writes out and lse.
//
// Tiled prefill for the rows of prefill chunks: grid (tile, KV head); a tile is up to
// tile_rows consecutive query rows of one sequence, all heads of the KV head's group, so each
// dequantized K/V row is read once per tile instead of once per row. The CTA walks the slots
// the tile attends (a chunk attends to every earlier slot of its sequence, then causally
// within itself) in chunks of 32: K and V of the chunk dequantized into shared memory, the
// tile x chunk scores (causal mask per row), an online-softmax update per query vector, and
// the accumulators (in registers, kMaxPrefillTileFloats / 128 per thread) rescaled and
// advanced. Queries are read once; no workspace.
//
// Every reduction has a fixed order, so results are deterministic and independent of the
// batch; they equal the CPU kernel up to fp32 summation order (documented tolerance in the
// gpu tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"

namespace kvserve::kernels::cuda {

// Device arrays describing the step's sequences (as kernels::cpu::PagedSeqs), plus the
// sequence of each query row, which the host knows when it builds the batch.
struct DevicePagedSeqs {
  int num_seqs = 0;
  int num_rows = 0;                              // query rows (tokens) of the step
  int max_kv_len = 0;                            // max of kv_lens (host-side value)
  const int32_t* seq_starts = nullptr;           // [num_seqs + 1]
  const int32_t* kv_lens = nullptr;              // [num_seqs]
  const int32_t* block_table_offsets = nullptr;  // [num_seqs + 1]
  const int32_t* block_tables = nullptr;         // block ids
  const int32_t* row_seq = nullptr;              // [num_rows] sequence index of each row
  // Optional prefill tiling (model::PlanAttentionRows). tiles == nullptr: every row goes
  // through the split-KV kernel. Otherwise the split-KV kernel runs only split_rows (decode
  // rows) and the tiled kernel the tiles: (first row, rows <= tile_rows), all rows of one
  // sequence; together they cover every row exactly once.
  int num_split_rows = 0;
  const int32_t* split_rows = nullptr;  // [num_split_rows]
  int num_tiles = 0;
  int tile_rows = 0;                    // largest tile; tile_rows * group * head_dim <= kMaxPrefillTileFloats
  const int32_t* tiles = nullptr;       // [num_tiles][2]
};

inline constexpr int kMaxAttentionHeadDim = 256;  // head_dim in [1, 256]
inline constexpr int kMaxAttentionGroup = 8;      // num_heads / num_kv_heads in [1, 8]
// The tiled prefill kernel keeps a tile's queries (rows x group heads x head_dim floats) in
// shared memory and its accumulators in registers: at most this many floats per tile
// (model::PrefillTileRows picks the rows).
inline constexpr int kMaxPrefillTileFloats = 8192;

// Per-layer attention variants, the twin of kernels::cpu::AttentionVariant:
//   window   the row at physical index p attends [p - window + 1, p] (0: every earlier slot);
//            splits and chunks wholly before a row's window read no block (its table entries
//            may be null: KvCacheManager::release_before)
//   softcap  Gemma 2's logit soft-cap: scores (already scaled) become softcap * tanh(s /
//            softcap) (0: none)
//   sinks    gpt-oss's learned sinks: [num_heads] device logits joining each head's softmax
//            denominator with no value (null: none)
// A soft-cap or sinks route every split-KV row through the general kernel (the vectorised one
// scores in the log2 domain and writes single-split rows itself).
struct DeviceAttentionVariant {
  int window = 0;
  float softcap = 0.0f;
  const float* sinks = nullptr;
};

// Bytes of device workspace PagedAttention needs (for the split-KV rows).
size_t PagedAttentionWorkspaceBytes(const cache::KvLayout& layout, int num_heads, const DevicePagedSeqs& seqs,
                                    int split_tokens);

// Same arguments and semantics as kernels::cpu::PagedAttention (device pointers), plus the
// split size (attended slots per split, > 0) and the stream. Returns 0 or a cudaError_t value;
// shapes outside the limits above return cudaErrorInvalidValue without launching.
int PagedAttention(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                   const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                   float* out, int64_t out_stride, float* lse, void* workspace, size_t workspace_bytes,
                   int split_tokens, void* stream, const DeviceAttentionVariant& variant = {});

// True when the vectorised split-KV kernel serves this layout and head count (K and V in one
// dtype of fp32, fp16, bf16, fp8_e4m3, int8; head_dim 64, 128 or 256; group 1, 2, 4 or 8;
// block_size a power of two): the model then sends prefill rows through split-KV as well.
bool VecSplitCovers(const cache::KvLayout& layout, int num_heads);

// Attention-probability mass per cached slot (H2O, SnapKV scores), the twin of
// kernels::cpu::AttentionMass:
//
//   mass[s][g][i] = sum over this step's rows j of s and query heads h of group g of
//                   exp(score_{j,h,i} - lse[j][h])                      (i < kv_len_s)
//   score = q_{j,h} · k_{g,i} * scale (soft-capped with the variant's cap), 0 outside row j's
//   window.
//
// Written (not accumulated) for i < kv_len_s; other entries are left as they are, so the
// caller zeroes the array once per step. One warp per (sequence, KV head, slot); lse from
// PagedAttention on the same inputs. Returns 0 or a cudaError_t value.
int AttentionMass(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                  const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                  const float* lse, float* mass, int64_t mass_stride, void* stream,
                  const DeviceAttentionVariant& variant = {});

}  // namespace kvserve::kernels::cuda
