// Factory for the CPU backend's KV cache: the device pool and the swap tier both in host
// memory, and the manager sized to match.
//
//   cache.kv_bytes        -> usable = kv_bytes / bytes_per_block;  pool = usable + 1 (null)
//   cache.host_swap_bytes  -> swap blocks  = host_swap_bytes / bytes_per_block
//   cache.host_cache_bytes -> cache blocks = host_cache_bytes / bytes_per_block (prefix tier)
//   host pool = swap blocks + cache blocks: swap may use all of it, the prefix tier at most
//   its own share and only free blocks (kv_cache_manager.h)
//   bytes_per_block = layers * (2 * kv_heads * block_size * head_dim * dtype bytes
//                               + scales for fp8/int8)            (kv_layout.h)
//   cache.demote_kv_bytes (part of kv_bytes) -> one pool per cache.demote_dtypes entry, each
//                            demote_kv_bytes / n_tiers / that tier's bytes_per_block blocks;
//                            the main pool gets kv_bytes - demote_kv_bytes; the low-rank key
//                            tier (cache.lowrank_key_rank > 0) counts as one more such pool
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_cache_manager.h"
#include "cache/kv_layout.h"
#include "cache/layer_groups.h"
#include "config/config.h"

namespace kvserve::cache {

struct HostKvCache {
  std::unique_ptr<HostKvStorage> storage;    // the KV pool ("device" blocks)
  std::unique_ptr<HostKvStorage> swap;       // host pool (swap + prefix tier); null when empty
  std::unique_ptr<KvCacheManager> manager;
  std::vector<std::unique_ptr<HostKvStorage>> demote_tiers;  // tier t + 1 at index t
};

// The layout of demotion tier `dtype` (K and V) of a pool laid out as `pool`.
inline KvLayout DemoteTierLayout(const KvLayout& pool, config::KvDtype dtype) {
  return WithPrecision(pool, dtype, dtype, pool.int4_group);
}

// The low-rank key tier: keys as `rank` coefficients in `k`, values in `v` (kv_layout.h).
inline KvLayout LowRankTierLayout(const KvLayout& pool, int rank, config::KvDtype k, config::KvDtype v) {
  KvLayout l = WithPrecision(pool, k, v, pool.int4_group);
  l.key_rank = rank;
  return l;
}

// Every demotion tier of `cfg` in tier order (tier t + 1 at index t): one per
// cache.demote_dtypes entry, then the low-rank tier when cache.lowrank_key_rank > 0.
// InvalidArgument naming cache.lowrank_key_rank when the rank is not below head_dim.
absl::StatusOr<std::vector<KvLayout>> DemoteTierLayouts(const config::CacheConfig& cfg, const KvLayout& pool);
// The name a request uses for tier t + 1 (kv_compression.demote): the dtype, or "lowrank".
std::string DemoteTierName(const config::CacheConfig& cfg, int t);
inline constexpr const char* kLowRankTierName = "lowrank";

// `model_dims` gives num_layers, num_kv_heads and head_dim; block_size and dtype come from
// `cfg`. InvalidArgument when the config or the dimensions are unusable (the budget must
// buy at least one block); ResourceExhausted when the memory cannot be allocated.
// `groups` (may be null or disabled): a hybrid model's layer groups; the pool's blocks then
// hold group_size slot arrays and every sequence gets window tables (kv_cache_manager.h).
absl::StatusOr<HostKvCache> MakeHostKvCache(const config::CacheConfig& cfg, KvLayout model_dims,
                                            base::Logger logger,
                                            const LayerGroups* groups = nullptr);

}  // namespace kvserve::cache
