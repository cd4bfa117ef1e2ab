// Intrusive doubly linked list of free block ids, in eviction order (front = next to reuse).
// The links live in two flat arrays indexed by block id, so push, pop and removal from the
// middle (a prefix-cache hit on a free block) are O(1) and never allocate.
//
//   index:    0 .. capacity-1 (blocks)                      capacity (sentinel)
//   prev_/next_ form one ring through the sentinel:
//
//     sentinel <-> front <-> ... <-> back <-> sentinel
//
//   prev_[b] == kNotQueued  <=>  block b is not in the queue.
//
// Header-only: every operation is a handful of loads and stores on the allocation path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/check.h"
#include "cache/cache_types.h"

namespace kvserve::cache {

class FreeBlockQueue {
 public:
  explicit FreeBlockQueue(int32_t capacity)
      : sentinel_(capacity), prev_(capacity + 1, kNotQueued), next_(capacity + 1, kNotQueued) {
    prev_[sentinel_] = sentinel_;
    next_[sentinel_] = sentinel_;
  }

  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t capacity() const { return sentinel_; }
  bool contains(BlockId b) const { return prev_[index(b)] != kNotQueued; }

  // Most recently freed: evicted last.
  void push_back(BlockId b) { link_after(prev_[sentinel_], index(b)); }
  // Reused first (blocks with no cached content are worth nothing once freed).
  void push_front(BlockId b) { link_after(sentinel_, index(b)); }

  std::optional<BlockId> front() const {
    if (size_ == 0) return std::nullopt;
    return BlockId{next_[sentinel_]};
  }
  std::optional<BlockId> pop_front() {
    if (size_ == 0) return std::nullopt;
    const int32_t b = next_[sentinel_];
    unlink(b);
    return BlockId{b};
  }
  void remove(BlockId b) {
    KVS_DCHECK(contains(b), "block ", b.value(), " is not in the free queue");
    unlink(index(b));
  }

  // Walks the queue front to back (invariant checks, tests). f(BlockId) -> void.
  template <typename F>
  void for_each(F&& f) const {
    for (int32_t b = next_[sentinel_]; b != sentinel_; b = next_[b]) f(BlockId{b});
  }

 private:
  static constexpr int32_t kNotQueued = -1;

  int32_t index(BlockId b) const {
    KVS_DCHECK(b.value() >= 0 && b.value() < sentinel_, "block ", b.value(), " out of range");
    return b.value();
  }
  void link_after(int32_t pos, int32_t b) {
    KVS_DCHECK(prev_[b] == kNotQueued, "block ", b, " queued twice");
    const int32_t nxt = next_[pos];
    prev_[b] = pos;
    next_[b] = nxt;
    next_[pos] = b;
    prev_[nxt] = b;
    ++size_;
  }
  void unlink(int32_t b) {
    const int32_t p = prev_[b];
    const int32_t n = next_[b];
    next_[p] = n;
    prev_[n] = p;
    prev_[b] = kNotQueued;
    next_[b] = kNotQueued;
    --size_;
  }

  int32_t sentinel_;
  int32_t size_ = 0;
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
};

}  // namespace kvserve::cache
