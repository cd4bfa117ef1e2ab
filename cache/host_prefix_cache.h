// The host prefix tier's index: full prefix blocks evicted from the device pool (or fetched
// from the remote tier), kept in host blocks of the shared host pool and found by the same
// chained, tenant-salted block hash as the device prefix cache.
//
//   host block id:   0     1     2     3     4     5
//   hash_:          [h7]  [-]   [h2]  [-]   [h9]  [-]      - = not held by this tier
//   lru_:           front(evicted first) -> 4 -> 0 -> 2 -> back(most recently used)
//   index_:         h7 -> 0, h2 -> 2, h9 -> 4                (one block per hash)
//
// Pure bookkeeping over host block ids; the ids come from (and go back to) the host pool's
// allocator (SwapSpace), the bytes live in the host KvStorage. Who may take how many host
// blocks is the manager's accounting rule (kv_cache_manager.h): swap first, this tier yields.
//
// Invariants (cache_invariants.cc): a host block has a hash here <=> it is in lru_ <=> it is
// indexed under that hash; size() <= capacity(); every held block is in use in the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache/cache_types.h"
#include "cache/free_block_queue.h"

namespace kvserve::cache {

// What the tier remembers about one held block besides its hash.
struct HostBlockInfo {
  BlockHash hash = kNoHash;
  uint64_t tenant_salt = 0;   // who may see it (remote tier address)
  bool remote_ok = false;     // may be written to the remote tier (not from a compressing sequence)
  bool from_remote = false;   // fetched from the remote tier and not loaded yet (hit accounting)
};

class HostPrefixCache {
 public:
  // `num_host_blocks`: ids of the whole host pool; `capacity`: most blocks this tier holds.
  HostPrefixCache(int32_t num_host_blocks, int32_t capacity);

  int32_t capacity() const { return capacity_; }
  int32_t size() const { return lru_.size(); }
  bool full() const { return size() >= capacity_; }
  bool enabled() const { return capacity_ > 0; }

  std::optional<BlockId> find(BlockHash h) const {
    auto it = index_.find(h.value());
    if (it == index_.end()) return std::nullopt;
    return BlockId{it->second};
  }
  bool holds(BlockId host) const { return lru_.contains(host); }
  const HostBlockInfo& info(BlockId host) const { return info_[host.value()]; }
  HostBlockInfo& mutable_info(BlockId host) { return info_[host.value()]; }

  // Most recently used now.
  void touch(BlockId host) {
    lru_.remove(host);
    lru_.push_back(host);
  }
  // Starts holding `host` (not held, hash not present) as the most recently used entry.
  void insert(BlockId host, const HostBlockInfo& info);
  // Stops holding `host`; the caller gives the id back to the pool.
  void erase(BlockId host);
  // Least recently used held block, if any.
  std::optional<BlockId> lru() const { return lru_.front(); }

  // f(BlockId, const HostBlockInfo&) from least to most recently used.
  template <typename F>
  void for_each(F&& f) const {
    lru_.for_each([&](BlockId b) { f(b, info_[b.value()]); });
  }
  int32_t index_size() const { return static_cast<int32_t>(index_.size()); }

 private:
  struct IdentityHash {
    size_t operator()(uint64_t h) const { return static_cast<size_t>(h); }
  };
  int32_t capacity_;
  FreeBlockQueue lru_;  // the intrusive list serves as an LRU of held blocks
  std::vector<HostBlockInfo> info_;
  absl::flat_hash_map<uint64_t, int32_t, IdentityHash> index_;
};

}  // namespace kvserve::cache
