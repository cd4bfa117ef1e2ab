#include "cache/host_kv_cache.h"

#include <bit>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "cache/cache_sizing.h"
#include "config/fields.h"

namespace kvserve::cache {

absl::StatusOr<std::vector<KvLayout>> DemoteTierLayouts(const config::CacheConfig& cfg,
                                                        const KvLayout& pool) {
  std::vector<KvLayout> tiers;
  for (config::KvDtype d : cfg.demote_dtypes) tiers.push_back(DemoteTierLayout(pool, d));
  if (cfg.lowrank_key_rank > 0) {
    if (cfg.lowrank_key_rank >= pool.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache.lowrank_key_rank=", cfg.lowrank_key_rank,
                       ": must be below the model's head_dim (", pool.head_dim, ")"));
    }
    tiers.push_back(
        LowRankTierLayout(pool, cfg.lowrank_key_rank, cfg.lowrank_k_dtype, cfg.lowrank_v_dtype));
  }
  return tiers;
}

std::string DemoteTierName(const config::CacheConfig& cfg, int t) {
  if (t >= 0 && t < static_cast<int>(cfg.demote_dtypes.size())) {
    return std::string(config::Name(cfg.demote_dtypes[static_cast<size_t>(t)]));
  }
  return kLowRankTierName;
}

absl::StatusOr<HostKvCache> MakeHostKvCache(const config::CacheConfig& cfg, KvLayout model_dims,
                                            base::Logger logger, const LayerGroups* groups) {
  if (cfg.block_size < 8 || cfg.block_size > 128 ||
      !std::has_single_bit(static_cast<unsigned>(cfg.block_size))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.block_size=", cfg.block_size, ": must be a power of two in [8,128]"));
  }
  if (model_dims.num_layers <= 0 || model_dims.num_kv_heads <= 0 || model_dims.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv cache: bad model dimensions (layers=", model_dims.num_layers,
        " kv_heads=", model_dims.num_kv_heads, " head_dim=", model_dims.head_dim, ")"));
  }
  const bool grouped = groups != nullptr && groups->enabled();
  if (grouped && !cfg.remote_kv_url.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache.remote_kv_url: the remote tier does not hold window-layer blocks, which layer "
        "groups keep for this hybrid model (",
        groups->ToString(), "); set cache.layer_groups=false to use it"));
  }
  if (grouped && cfg.demote_kv_bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache.demote_kv_bytes=", cfg.demote_kv_bytes,
        ": demotion does not run on hybrid models (sliding-window layers); set it to 0"));
  }
  KvLayout layout = model_dims;
  layout.block_size = cfg.block_size;
  if (grouped) layout.layer_slots = groups->group_size;
  layout = WithPrecision(layout, config::EffectiveKDtype(cfg), config::EffectiveVDtype(cfg),
                         cfg.kv_int4_group);

  const uint64_t demote_bytes = cfg.demote_kv_bytes < cfg.kv_bytes ? cfg.demote_kv_bytes : 0;
  const int32_t usable = UsableBlocksForBudget(cfg.kv_bytes - demote_bytes, layout);
  if (usable < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cache.kv_bytes=", cfg.kv_bytes,
                                                   ": buys no block of ", layout.bytes_per_block(),
                                                   " bytes"));
  }
  const int32_t swap_blocks = UsableBlocksForBudget(cfg.host_swap_bytes, layout);
  const int32_t cache_blocks = UsableBlocksForBudget(cfg.host_cache_bytes, layout);
  if (static_cast<int64_t>(swap_blocks) + cache_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        "cache.host_swap_bytes + cache.host_cache_bytes: too many host blocks");
  }
  // Layer groups: a sequence holding window tables is recomputed, never swapped, and the
  // host prefix tier holds no window blocks: no host pool.
  const int32_t host_blocks =
      grouped ? 0 : swap_blocks + cache_blocks;  // one pool (kv_cache_manager.h)

  HostKvCache cache;
  KVS_ASSIGN_OR_RETURN(cache.storage, HostKvStorage::Create(layout, usable + 1));
  if (host_blocks > 0) {
    KVS_ASSIGN_OR_RETURN(cache.swap, HostKvStorage::Create(layout, host_blocks));
  }
  KvCacheManagerOptions opts;
  KVS_ASSIGN_OR_RETURN(const std::vector<KvLayout> tiers, DemoteTierLayouts(cfg, layout));
  if (demote_bytes > 0 && !tiers.empty()) {
    const uint64_t per_tier = demote_bytes / tiers.size();
    for (size_t t = 0; t < tiers.size(); ++t) {
      const KvLayout& tier = tiers[t];
      const int32_t blocks = UsableBlocksForBudget(per_tier, tier);
      if (blocks < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("cache.demote_kv_bytes=", cfg.demote_kv_bytes, ": buys no block of the ",
                         DemoteTierName(cfg, static_cast<int>(t)), " tier (",
                         tier.bytes_per_block(), " bytes)"));
      }
      KVS_ASSIGN_OR_RETURN(auto storage, HostKvStorage::Create(tier, blocks + 1));
      cache.demote_tiers.push_back(std::move(storage));
      opts.demote_tier_blocks.push_back(blocks);
      opts.demote_tier_block_bytes.push_back(tier.bytes_per_block());
    }
  }
  opts.layout = layout;
  opts.num_blocks = usable + 1;
  opts.num_host_blocks = host_blocks;
  opts.host_cache_blocks = grouped ? 0 : cache_blocks;
  if (!cfg.remote_kv_url.empty()) {
    opts.remote_writes =
        cfg.remote_kv_write_back ? RemoteWrites::kWriteBack : RemoteWrites::kWriteThrough;
  }
  opts.enable_prefix_caching = cfg.enable_prefix_caching;
  if (grouped) {
    opts.num_window_groups = groups->num_window_groups;
    opts.group_window = groups->window;
    logger.info(
        "kv cache: layer groups for a hybrid model: %s; swap and the host prefix tier are off for "
        "it "
        "(cache.layer_groups=false keeps one table)",
        groups->ToString());
  }
  cache.manager = std::make_unique<KvCacheManager>(opts, std::move(logger));
  return cache;
}

}  // namespace kvserve::cache
