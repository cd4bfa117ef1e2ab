// Snapshot of the KV cache's occupancy and cumulative counters, for metrics and the
// scheduler's watermarks. A plain value: KvCacheManager::usage() fills it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace kvserve::cache {

struct CacheUsage {
  // ---- device pool (usable blocks: the null block is not counted)
  int32_t block_size = 0;
  int32_t total_blocks = 0;
  int32_t free_blocks = 0;         // in the free queue, including cached_free_blocks
  int32_t used_blocks = 0;         // referenced by at least one sequence
  int32_t cached_free_blocks = 0;  // free but still holding reusable prefix content
  int32_t num_sequences = 0;       // sequences known to the manager (incl. swapped out)

  // ---- prefix cache (cumulative)
  uint64_t prefix_queries = 0;         // match_prefix calls
  uint64_t prefix_query_tokens = 0;    // prompt tokens looked up
  uint64_t prefix_hit_tokens = 0;      // tokens served from cached blocks
  uint64_t prefix_query_blocks = 0;    // full blocks eligible for a hit
  uint64_t prefix_hit_blocks = 0;      // blocks served from the cache

  // ---- allocation (cumulative)
  uint64_t allocated_blocks = 0;       // blocks taken from the free queue for new content
  uint64_t evicted_blocks = 0;         // cached blocks whose content was dropped for reuse
  uint64_t cow_copies = 0;             // copy-on-write block copies
  uint64_t window_released_blocks = 0; // blocks that left every layer's sliding window

  // ---- host swap tier
  int32_t swap_total_blocks = 0;
  int32_t swap_used_blocks = 0;
  uint64_t swapped_out_blocks = 0;     // cumulative device -> host block copies
  uint64_t swapped_in_blocks = 0;      // cumulative host -> device block copies
  uint64_t swap_in_reused_blocks = 0;  // swap-in blocks served by still-cached device blocks
  // ---- host prefix tier (shares the host pool with swap)
  int32_t host_cache_capacity_blocks = 0;
  int32_t host_cache_blocks = 0;       // held now
  uint64_t host_query_blocks = 0;      // blocks looked up in the host tier (device misses)
  uint64_t host_hit_blocks = 0;        // prefix blocks loaded from the host tier (cumulative)
  uint64_t remote_hit_blocks = 0;      // of those: fetched from the remote tier before
  uint64_t offloaded_blocks = 0;       // evicted device blocks copied to the host tier
  uint64_t offload_skipped_blocks = 0; // evicted device blocks dropped (no free host block)
  uint64_t host_evicted_blocks = 0;    // host-tier blocks dropped by its LRU
  uint64_t host_yielded_blocks = 0;    // host-tier blocks given up to swap
  // ---- demotion tier pools (all tiers together; their blocks are smaller, kv_layout.h)
  int32_t demote_total_blocks = 0;
  int32_t demote_used_blocks = 0;      // granted to sequences

  double usage_ratio() const {
    return total_blocks == 0 ? 0.0 : static_cast<double>(used_blocks) / total_blocks;
  }
  double prefix_hit_rate() const {
    return prefix_query_tokens == 0
               ? 0.0
               : static_cast<double>(prefix_hit_tokens) / static_cast<double>(prefix_query_tokens);
  }
  double swap_usage_ratio() const {
    return swap_total_blocks == 0 ? 0.0 : static_cast<double>(swap_used_blocks) / swap_total_blocks;
  }

  std::string ToString() const {
    return absl::StrFormat(
        "blocks used=%d free=%d (cached %d) total=%d usage=%.3f seqs=%d | prefix queries=%d "
        "hit_tokens=%d/%d hit_blocks=%d/%d | allocated=%d evicted=%d cow=%d | swap used=%d/%d "
        "out=%d in=%d reused=%d",
        used_blocks, free_blocks, cached_free_blocks, total_blocks, usage_ratio(), num_sequences,
        prefix_queries, prefix_hit_tokens, prefix_query_tokens, prefix_hit_blocks,
        prefix_query_blocks, allocated_blocks, evicted_blocks, cow_copies, swap_used_blocks,
        swap_total_blocks, swapped_out_blocks, swapped_in_blocks, swap_in_reused_blocks);
  }
};

}  // namespace kvserve::cache
