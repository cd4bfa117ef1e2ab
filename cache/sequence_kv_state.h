// What the cache manager keeps per sequence. Read-only to everyone but KvCacheManager
// (the invariant checker and tests inspect it through KvCacheManager::for_each_sequence).
//
//   table:     [b3][b8][b1][b6]          num_tokens = 58 (block_size 16)
//   hashes:    [h0][h1]                  committed: full blocks published (or hit) so far,
//                                        hashes[i] = chain hash of block i
//   publish_limit_tokens = 40            blocks reaching past token 40 are never published
//   root:      chain parent of block 0   (from the PrefixKey; kNoHash: never publish)
//
// Swapped out: the table is empty, host_blocks holds the KV (one host block per former
// table entry, same order) and swapped_num_tokens the length; hashes stay valid.
//
// Sliding-window release (every layer windowed, KvCacheManager::release_before): the first
// `released_front` table entries are kNullBlock, their blocks handed back to the pool; the
// attention never reads them again and logical indices are unchanged.
//
//   table:     [null][null][b6][b2]      released_front = 2
//
// Layer groups (hybrid models, cache/layer_groups.h): `window` holds one table per window
// group, indexed by absolute position (never compacted), all of the same length; their first
// `window_released_front` entries are kNullBlock (left every window layer's view, or, after a
// prefix hit, never needed). Never swapped (such a sequence is recomputed); shared by fork.
// Their full blocks are published for prefix hits under group-tagged hashes of the main
// chain (KvCacheManager::window_hash); `window_committed` counts the blocks done so far.
//
// Demotion tiers (issue 18): tier_blocks[t] are the blocks of demotion tier pool t that the
// sequence was granted (KvCacheManager::reserve_tier_blocks); the runner keeps its demoted
// tokens there. Never shared, never published, never swapped (such a sequence is recomputed).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "cache/block_table.h"
#include "cache/cache_types.h"

namespace kvserve::cache {

struct SequenceKvState {
  explicit SequenceKvState(int block_size) : table(block_size) {}

  // Back to the state of a brand-new sequence, keeping vector capacities for reuse.
  void reset() {
    table.clear();
    hashes.clear();
    host_blocks.clear();
    root = kNoHash;
    tenant_salt = 0;
    publish_limit_tokens = std::numeric_limits<int64_t>::max();
    swapped = false;
    swapped_num_tokens = 0;
    released_front = 0;
    for (auto& t : tier_blocks) t.clear();
    for (auto& w : window) w.clear();
    window_released_front = 0;
    window_committed = 0;
  }

  bool holds_window_blocks() const { return !window.empty() && !window[0].empty(); }

  bool holds_tier_blocks() const {
    for (const auto& t : tier_blocks) {
      if (!t.empty()) return true;
    }
    return false;
  }

  int32_t num_committed_blocks() const { return static_cast<int32_t>(hashes.size()); }
  int64_t num_tokens() const { return swapped ? swapped_num_tokens : table.num_tokens(); }

  BlockTable table;
  std::vector<BlockHash> hashes;
  BlockHash root = kNoHash;
  uint64_t tenant_salt = 0;  // TenantSalt(key) of match_prefix: remote-tier address
  int64_t publish_limit_tokens = std::numeric_limits<int64_t>::max();
  bool swapped = false;
  int64_t swapped_num_tokens = 0;
  std::vector<BlockId> host_blocks;
  int32_t released_front = 0;  // leading table entries released to the pool (kNullBlock)
  std::vector<std::vector<BlockId>> tier_blocks;  // [demotion tier]; sized on first grant
  std::vector<BlockTable> window;     // [window group]; sized at creation when groups are on
  int32_t window_released_front = 0;  // leading entries of every window table released
  int32_t window_committed = 0;       // leading window-table blocks published (or hit)
};

}  // namespace kvserve::cache
