// Prefix index: content hash of a full block -> physical block holding that content.
//
// A multimap: two sequences that fill identical blocks at the same time both keep their own
// copy (NOTE: no de-duplication, because block tables are append-only: a block id handed
// to a sequence never changes under it). Every copy is indexed, so evicting one leaves the
// other findable.
//
//   head_:         hash -> newest block with that hash        (flat hash map, reserved once)
//   next_[block]:  next older block with the same hash, or kEnd (intrusive chain)
//
//   h1 -> b7 -> b3 -> end
//   h2 -> b5 -> end
//
// Capacity is reserved for every block at construction, so inserts never rehash into new
// memory on the hot path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache/cache_types.h"

namespace kvserve::cache {

class PrefixIndex {
 public:
  explicit PrefixIndex(int32_t num_blocks);

  // Indexes `block` under `hash`. The block must not already be indexed.
  void insert(BlockHash hash, BlockId block);
  // Some block holding `hash`, or nullopt.
  std::optional<BlockId> find(BlockHash hash) const {
    auto it = head_.find(hash.value());
    if (it == head_.end()) return std::nullopt;
    return BlockId{it->second};
  }
  // Removes `block` from the entries of `hash`. The pair must be indexed.
  void erase(BlockHash hash, BlockId block);

  // Number of indexed blocks (all chains together).
  int32_t size() const { return size_; }

  // f(BlockHash, BlockId) for every indexed pair.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [hash, head] : head_) {
      for (int32_t b = head; b != kEnd; b = next_[b]) f(BlockHash{hash}, BlockId{b});
    }
  }

 private:
  static constexpr int32_t kEnd = -1;
  // Block hashes are already uniformly mixed 64-bit values: use them as they are.
  struct IdentityHash {
    size_t operator()(uint64_t h) const { return static_cast<size_t>(h); }
  };

  absl::flat_hash_map<uint64_t, int32_t, IdentityHash> head_;
  std::vector<int32_t> next_;
  int32_t size_ = 0;
};

}  // namespace kvserve::cache
