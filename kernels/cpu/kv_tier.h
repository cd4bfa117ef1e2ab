// One KV precision tier's host storage (the pool, or a demotion tier of issue 18), and row
// access that hides how the tier encodes keys: a full-width tier quantizes and dequantizes
// rows (kv_quant.h); a low-rank tier (layout.key_rank > 0) also projects keys onto its
// per-(layer, KV head) basis on write and reconstructs mu + R^T c on read (low_rank_keys.h).
// Callers always see head_dim floats per row, so demotion code is the same for every tier.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"
#include "kernels/cpu/low_rank_keys.h"

namespace kvserve::kernels::cpu {

// One tier's storage, every layer (cache/kv_layout.h layout).
struct KvTierStorage {
  cache::KvLayout layout;
  std::byte* const* layer_data = nullptr;
  float* const* layer_scales = nullptr;  // may be null when the tier's dtypes have no scales
  int64_t num_blocks = 0;                 // blocks of the storage (bounds of table entries)
  // Low-rank tiers only: per layer, the packed basis of every KV head (low_rank_keys.h);
  // null for full-width tiers. Invariant: non-null iff layout.key_rank > 0.
  const float* const* key_basis = nullptr;
};

// The packed basis of (layer, head) of a low-rank tier.
inline const float* TierHeadBasis(const KvTierStorage& t, int layer, int head);

// Row (block, offset) of (layer, K|V, head), decoded into dst (head_dim floats).
void ReadTierRow(const KvTierStorage& t, int layer, int64_t block, int kv, int head, int offset, float* dst);

// Writes n consecutive slots [offset, offset + n) of one block from src (head_dim floats per
// row, src_stride apart), as WriteKvRows does (rows [0, offset) must be valid).
void WriteTierRows(const KvTierStorage& t, int layer, int64_t block, int kv, int head, int offset, int n,
                   const float* src, int64_t src_stride);

inline const float* TierHeadBasis(const KvTierStorage& t, int layer, int head) {
  return t.key_basis[layer] + static_cast<size_t>(head) * LowRankHeadFloats(t.layout.head_dim, t.layout.key_rank);
}

}  // namespace kvserve::kernels::cpu
