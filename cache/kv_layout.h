// Physical layout of the paged KV cache, shared by the block pool, the host and CUDA
// storages and every attention kernel (CPU and CUDA). Plain data, no CUDA types.
//
// One pool of `num_blocks` blocks; each block holds `block_size` token slots of every
// layer. For each layer the storage is one contiguous array:
//
//   data[layer]:   [num_blocks][2 (K,V)][num_kv_heads][block_size][head_dim]   (elements of dtype)
//   scales[layer]: [num_blocks][2 (K,V)][num_kv_heads][block_size]            (float, int8/fp8 only)
//
// Why this order: a decode step reads, per (sequence, KV head), all K rows of a block and
// then all V rows; keeping [block_size][head_dim] innermost makes each of those one
// contiguous run of block_size*head_dim elements (good for CPU prefetch and for coalesced
// CUDA loads), and K/V of one block sit next to each other so a block copy (CoW, swap,
// compaction) is one memcpy per layer. Per-token, per-head scales sit beside the block
// data so quantized blocks move with their scales.
//
// A token's physical slot is `block_id * block_size + offset`. Compaction rewrites rows
// per (layer, KV head), so the slot -> token map may differ between heads; every head of
// a sequence holds the same number of valid slots, so one block table serves them all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config/config.h"

namespace kvserve::cache {

inline size_t KvDtypeBytes(config::KvDtype d) {
  switch (d) {
    case config::KvDtype::kFp32: return 4;
    case config::KvDtype::kFp16:
    case config::KvDtype::kBf16: return 2;
    case config::KvDtype::kFp8E4M3:
    case config::KvDtype::kInt8: return 1;
  }
  return 4;
}

inline bool KvDtypeHasScales(config::KvDtype d) {
  return d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8;
}

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  config::KvDtype dtype = config::KvDtype::kFp32;

  size_t elem_bytes() const { return KvDtypeBytes(dtype); }
  bool has_scales() const { return KvDtypeHasScales(dtype); }
  // Elements of one (block, K|V, head) run: block_size * head_dim.
  size_t head_run_elems() const { return static_cast<size_t>(block_size) * head_dim; }
  // Elements of one block of one layer (K and V, all heads).
  size_t block_elems() const { return 2 * static_cast<size_t>(num_kv_heads) * head_run_elems(); }
  // Scale entries of one block of one layer.
  size_t block_scales() const {
    return has_scales() ? 2 * static_cast<size_t>(num_kv_heads) * block_size : 0;
  }
  // Bytes one block occupies across all layers (data + scales): the pool's unit of memory.
  size_t bytes_per_block() const {
    return static_cast<size_t>(num_layers) * (block_elems() * elem_bytes() + block_scales() * sizeof(float));
  }
  // Bytes one token occupies across all layers.
  double bytes_per_token() const { return static_cast<double>(bytes_per_block()) / block_size; }

  // Element offset of (block, kv: 0=K 1=V, head, slot-in-block) inside data[layer].
  size_t elem_offset(int64_t block, int kv, int head, int offset) const {
    return ((static_cast<size_t>(block) * 2 + kv) * num_kv_heads + head) * head_run_elems() +
           static_cast<size_t>(offset) * head_dim;
  }
  // Index of the matching scale inside scales[layer].
  size_t scale_offset(int64_t block, int kv, int head, int offset) const {
    return ((static_cast<size_t>(block) * 2 + kv) * num_kv_heads + head) * block_size + offset;
  }
};

}  // namespace kvserve::cache
