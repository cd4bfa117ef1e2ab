// Physical layout of the paged KV cache, shared by the block pool, the host and CUDA
// storages and every attention kernel (CPU and CUDA). Plain data, no CUDA types.
//
// One pool of `num_blocks` blocks; each block holds `block_size` token slots of every
// layer. For each layer the storage is one contiguous byte array and one float array:
//
//   data[layer]:   [num_blocks] x ( K: [num_kv_heads][K run]  V: [num_kv_heads][V run] )
//                  run = [block_size][head_dim] codes of that side's dtype (int4: two per byte)
//   scales[layer]: [num_blocks] x ( K: [num_kv_heads][K scales]  V: [num_kv_heads][V scales] )
//
//   side dtype   scales per (block, head) run          meaning
//   fp32/16/bf16 0                                      -
//   fp8/int8     block_size                             one per token: max|x| / code max
//   int4 (K)     head_dim                               per channel, over the block's tokens
//                                                       (KIVI's per-channel keys)
//   int4 (V)     block_size * groups                    per token, per `int4_group` elements
//                                                       of head_dim (KIVI's per-token values)
//   (an int4 scale slot holds (step, min) as two fp16: kernels/cpu/kv_quant.h)
//
// Low-rank keys (issue 18): a layout with key_rank = r > 0 stores each key as r coefficients
// in a per-(layer, KV head) PCA basis instead of head_dim elements (kernels/cpu/low_rank_keys.h):
// K's run is [block_size][r] codes of K's dtype, and everything above that is per element of
// a K row (int4 channel scales, row bytes) counts r, not head_dim. Values stay head_dim wide.
// Only demotion tiers are low-rank; the pool never is (0 = full keys).
//
// When K and V share a dtype other than int4 ("uniform"), this is exactly the original
// element layout [num_blocks][2 (K,V)][num_kv_heads][block_size][head_dim] with scales
// [num_blocks][2][num_kv_heads][block_size] (elem_offset / scale_offset / block_elems
// address it; meaningful only for uniform layouts). Kernels use the byte-addressed run_*
// helpers, valid for every layout (the CUDA kernels precompute them: KvGeometry in
// kernels/cuda/kv_codes.cuh).
//
// Why this order: a decode step reads, per (sequence, KV head), all K rows of a block and
// then all V rows; keeping [block_size][head_dim] innermost makes each of those one
// contiguous run (good for CPU prefetch and for coalesced CUDA loads), and K/V of one block
// sit next to each other so a block copy (CoW, swap, compaction) is one memcpy per layer.
// Scales sit beside the block data so quantized blocks move with their scales.
//
// A token's physical slot is `block_id * block_size + offset`. Compaction rewrites rows
// per (layer, KV head), so the slot -> token map may differ between heads; every head of
// a sequence holds the same number of valid slots, so one block table serves them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "config/config.h"

namespace kvserve::cache {

// Bytes of one element, rounded up (int4 packs two elements per byte: see KvDtypeBits).
inline size_t KvDtypeBytes(config::KvDtype d) {
  switch (d) {
    case config::KvDtype::kFp32: return 4;
    case config::KvDtype::kFp16:
    case config::KvDtype::kBf16: return 2;
    case config::KvDtype::kFp8E4M3:
    case config::KvDtype::kInt8:
    case config::KvDtype::kInt4: return 1;
  }
  return 4;
}

inline int KvDtypeBits(config::KvDtype d) {
  return d == config::KvDtype::kInt4 ? 4 : 8 * static_cast<int>(KvDtypeBytes(d));
}

inline bool KvDtypeHasScales(config::KvDtype d) {
  return d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8 || d == config::KvDtype::kInt4;
}

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  // K's dtype, and V's unless v_dtype_split is set.
  config::KvDtype dtype = config::KvDtype::kFp32;
  std::optional<config::KvDtype> v_dtype_split;  // V's dtype when it differs from K's
  int int4_group = 32;  // int4 V: elements per (step, min) group along head_dim
  int key_rank = 0;     // > 0: keys stored as this many low-rank coefficients (see above)
  // Slot arrays of the storage when they differ from num_layers: a hybrid model's layer
  // groups (cache/layer_groups.h) put group_size layers in each block. 0: one per layer.
  int layer_slots = 0;

  int slots() const { return layer_slots > 0 ? layer_slots : num_layers; }

  config::KvDtype k_dtype() const { return dtype; }
  config::KvDtype v_dtype() const { return v_dtype_split.value_or(dtype); }
  config::KvDtype side_dtype(int kv) const { return kv == 0 ? k_dtype() : v_dtype(); }
  // Elements of one stored K (kv = 0) or V (kv = 1) row: head_dim, or key_rank for low-rank K.
  int side_dim(int kv) const { return kv == 0 && key_rank > 0 ? key_rank : head_dim; }
  // K and V share one non-int4 dtype at full width: the original layout every backend reads.
  bool uniform() const { return k_dtype() == v_dtype() && dtype != config::KvDtype::kInt4 && key_rank == 0; }
  // Scale groups of one int4 V row.
  int v_groups() const { return (head_dim + int4_group - 1) / int4_group; }

  // ---- byte-addressed geometry, valid for every layout
  size_t row_bytes(int kv) const {
    return side_dtype(kv) == config::KvDtype::kInt4 ? (static_cast<size_t>(side_dim(kv)) + 1) / 2
                                                    : static_cast<size_t>(side_dim(kv)) * KvDtypeBytes(side_dtype(kv));
  }
  size_t run_bytes(int kv) const { return static_cast<size_t>(block_size) * row_bytes(kv); }
  size_t run_scales(int kv) const {
    switch (side_dtype(kv)) {
      case config::KvDtype::kFp8E4M3:
      case config::KvDtype::kInt8: return static_cast<size_t>(block_size);
      case config::KvDtype::kInt4:
        return kv == 0 ? static_cast<size_t>(side_dim(0)) : static_cast<size_t>(block_size) * v_groups();
      default: return 0;
    }
  }
  // Bytes of one block of one layer (K and V data, all heads).
  size_t block_data_bytes() const { return static_cast<size_t>(num_kv_heads) * (run_bytes(0) + run_bytes(1)); }
  // Byte offset of the (block, kv, head) run inside data[layer].
  size_t run_byte_offset(int64_t block, int kv, int head) const {
    return static_cast<size_t>(block) * block_data_bytes() +
           (kv == 0 ? 0 : static_cast<size_t>(num_kv_heads) * run_bytes(0)) + static_cast<size_t>(head) * run_bytes(kv);
  }
  // Index of the run's first scale inside scales[layer].
  size_t run_scale_offset(int64_t block, int kv, int head) const {
    return static_cast<size_t>(block) * block_scales() +
           (kv == 0 ? 0 : static_cast<size_t>(num_kv_heads) * run_scales(0)) + static_cast<size_t>(head) * run_scales(kv);
  }

  bool has_scales() const { return KvDtypeHasScales(k_dtype()) || KvDtypeHasScales(v_dtype()); }
  // Scale entries of one block of one layer.
  size_t block_scales() const { return static_cast<size_t>(num_kv_heads) * (run_scales(0) + run_scales(1)); }
  // Bytes one block occupies across its slot arrays (data + scales): the pool's unit of memory.
  size_t bytes_per_block() const {
    return static_cast<size_t>(slots()) * (block_data_bytes() + block_scales() * sizeof(float));
  }
  // Bytes one token occupies across all layers, scales included.
  double bytes_per_token() const { return static_cast<double>(bytes_per_block()) / block_size; }
  // The K (kv = 0) or V (kv = 1) share of bytes_per_token.
  double side_bytes_per_token(int kv) const {
    return static_cast<double>(slots()) * num_kv_heads *
           (static_cast<double>(run_bytes(kv)) +
            static_cast<double>(run_scales(kv)) * sizeof(float)) /
           block_size;
  }

  // ---- element addressing of uniform layouts (see above)
  size_t elem_bytes() const { return KvDtypeBytes(dtype); }
  // Elements of one (block, K|V, head) run: block_size * head_dim.
  size_t head_run_elems() const { return static_cast<size_t>(block_size) * head_dim; }
  // Elements of one block of one layer (K and V, all heads).
  size_t block_elems() const { return 2 * static_cast<size_t>(num_kv_heads) * head_run_elems(); }
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

// `l` with K stored as `k`, V as `v` and int4 values grouped by `int4_group` elements.
inline KvLayout WithPrecision(KvLayout l, config::KvDtype k, config::KvDtype v, int int4_group) {
  l.dtype = k;
  l.v_dtype_split.reset();
  if (v != k) l.v_dtype_split = v;
  l.int4_group = int4_group;
  return l;
}

// Same geometry and precision: blocks of one can be copied into the other byte for byte.
inline bool SameKvLayout(const KvLayout& a, const KvLayout& b) {
  return a.num_layers == b.num_layers && a.slots() == b.slots() &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.block_size == b.block_size && a.k_dtype() == b.k_dtype() && a.v_dtype() == b.v_dtype() &&
         a.int4_group == b.int4_group && a.key_rank == b.key_rank;
}

}  // namespace kvserve::cache
