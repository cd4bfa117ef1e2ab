// The pool of physical KV blocks: per-block metadata in flat arrays indexed by BlockId, the
// LRU free queue and the prefix index. Pure bookkeeping: the bytes live in a KvStorage.
//
//   id:         0     1     2     3     4     5    ...  num_blocks-1
//   refcount_: [N]   [2]   [0]   [1]   [0]   [0]   ...
//   hash_:     [-]   [h1]  [h2]  [-]   [-]   [h5]  ...
//               |           |           |     |
//             null      free, cached  free   free, cached
//            (never
//           allocated)  free queue (front = reused first):  4 -> 2 -> 5
//                       prefix index: h1 -> 1, h2 -> 2, h5 -> 5
//
// Invariants (checked by cache_invariants.h):
//   - block 0 is the permanent null block: never in the queue, never allocated or hashed;
//   - a usable block is in the free queue  <=>  its refcount is 0;
//   - a block has a hash  <=>  it is in the prefix index under that hash;
//   - num_free() + num_used() == num_usable().
//
// Lazy eviction (NOTE): a freed block keeps its hash and stays findable, so a later request
// with the same prefix takes it back out of the middle of the queue (a hit on a free block).
// It loses its hash only when allocate() pops it for new content: that is an eviction.
//
// Queue order (NOTE): freed hashed blocks go to the back (LRU), freed blocks without a hash
// go to the front: they can never be hit again, so reusing them first keeps cached content
// alive longer. Callers free a sequence's blocks tail first, so among blocks of equal age
// the end of a prefix chain is evicted before its start (the start is shared more often).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/check.h"
#include "cache/cache_types.h"
#include "cache/free_block_queue.h"
#include "cache/prefix_index.h"

namespace kvserve::cache {

class BlockPool {
 public:
  // `num_blocks` includes the null block; at least 2.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t num_usable() const { return num_blocks() - 1; }
  int32_t num_free() const { return free_.size(); }
  int32_t num_used() const { return num_usable() - num_free(); }
  // Free blocks still holding a hash (reusable through the prefix index).
  int32_t num_cached_free() const { return num_cached_free_; }
  // Cached blocks whose hash was dropped because allocate() reused them.
  uint64_t num_evictions() const { return num_evictions_; }

  // Takes the front of the free queue with refcount 1, evicting its cached content if any.
  // nullopt when no block is free: the caller decides (preempt, swap, wait).
  std::optional<BlockId> allocate() {
    std::optional<BlockId> b = free_.pop_front();
    if (!b) return std::nullopt;
    const int32_t i = b->value();
    if (hash_[i] != kNoHash) {
      index_.erase(hash_[i], *b);
      hash_[i] = kNoHash;
      --num_cached_free_;
      ++num_evictions_;
    }
    refcount_[i] = 1;
    return b;
  }

  // One more reference (fork, prefix hit). A free block leaves the queue (cache hit).
  void retain(BlockId b) {
    const int32_t i = checked(b);
    if (refcount_[i]++ == 0) {
      free_.remove(b);
      if (hash_[i] != kNoHash) --num_cached_free_;
    }
  }

  // Drops one reference; at zero the block becomes free (see queue order above).
  void release(BlockId b) {
    const int32_t i = checked(b);
    KVS_DCHECK(refcount_[i] > 0, "release of free block ", i);
    if (--refcount_[i] == 0) {
      if (hash_[i] != kNoHash) {
        free_.push_back(b);
        ++num_cached_free_;
      } else {
        free_.push_front(b);
      }
    }
  }

  int32_t refcount(BlockId b) const { return refcount_[checked(b)]; }
  BlockHash hash(BlockId b) const { return hash_[checked(b)]; }
  bool is_free(BlockId b) const { return free_.contains(b); }

  // ---- prefix cache
  std::optional<BlockId> find_cached(BlockHash h) const { return index_.find(h); }
  // Marks an allocated, unhashed, full block as holding content `h` and indexes it.
  void publish(BlockId b, BlockHash h);
  // Forgets the content of an allocated block about to be overwritten.
  void unpublish(BlockId b);

  const FreeBlockQueue& free_queue() const { return free_; }
  const PrefixIndex& index() const { return index_; }

 private:
  int32_t checked(BlockId b) const {
    KVS_DCHECK(b.value() > 0 && b.value() < num_blocks(), "bad block id ", b.value());
    return b.value();
  }

  std::vector<int32_t> refcount_;
  std::vector<BlockHash> hash_;
  FreeBlockQueue free_;
  PrefixIndex index_;
  int32_t num_cached_free_ = 0;
  uint64_t num_evictions_ = 0;
};

}  // namespace kvserve::cache
