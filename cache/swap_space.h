// The host swap tier's block accounting: a fixed set of host blocks (ids into the host
// KvStorage of the tier) that hold the KV of preempted, swapped-out sequences.
//
//   host block id:  0    1    2    3    4    5
//   free_[]:       [  ] [x ] [  ] [x ] [x ] [  ]      x = free
//   stack_:        5 ... top -> 4, 3, 1                (LIFO: recently touched memory first)
//
// No prefix caching and no sharing here: a swapped-out block has exactly one owner (the
// sequence that was swapped out), so a stack of free ids is all it takes. There is no null
// block: every id is usable. Allocation is all-or-nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/cache_types.h"

namespace kvserve::cache {

class SwapSpace {
 public:
  explicit SwapSpace(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(is_free_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(stack_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  bool is_free(BlockId b) const { return is_free_[b.value()] != 0; }

  // Appends `n` host blocks to `out`, or returns false and changes nothing.
  bool allocate(int32_t n, std::vector<BlockId>& out);
  void release(std::span<const BlockId> blocks);

 private:
  std::vector<int32_t> stack_;
  std::vector<uint8_t> is_free_;
};

}  // namespace kvserve::cache
