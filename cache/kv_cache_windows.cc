// KvCacheManager's window tables (layer groups, cache/layer_groups.h): the members that grow,
// shrink and expose them, apart from the main-table code in kv_cache_manager.cc. Window
// tables are private to their sequence (shared only by fork), never published or swapped,
// and indexed by absolute position; every one of a sequence's tables has the same length.
#include <algorithm>

#include "base/check.h"
#include "cache/kv_cache_manager.h"

namespace kvserve::cache {

int32_t KvCacheManager::window_blocks_needed(const SequenceKvState& s, int num_new_tokens) const {
  int32_t need = 0;
  for (const BlockTable& w : s.window) {
    need += w.BlocksFor(w.num_tokens() + num_new_tokens) - w.num_blocks();
    if (num_new_tokens > 0 && w.tail_fill() != 0 && pool_.refcount(w.back()) > 1) ++need;
  }
  return need;
}

void KvCacheManager::grow_windows(SequenceKvState& s, int num_new_tokens, AllocationDelta& d) {
  if (s.window.empty()) return;
  const int32_t first = s.window[0].num_blocks();
  const int64_t tokens = s.window[0].num_tokens();  // before group 0 grows below
  d.window_first_block = first;
  for (BlockTable& w : s.window) {
    KVS_DCHECK(w.num_blocks() == first && w.num_tokens() == tokens, "window tables differ");
    if (num_new_tokens > 0 && w.tail_fill() != 0 && pool_.refcount(w.back()) > 1) {
      // Shared by a fork: the tail is copied before new rows land in it (as the main table).
      const BlockId tail = w.back();
      const BlockId copy = *allocate_device_block();
      pool_.release(tail);
      w.replace_block(w.num_blocks() - 1, copy);
      d.window_first_block = first - 1;
      d.window_blocks.push_back(copy);
      d.window_cow.push_back(BlockCopy{tail, copy});
      ++cow_copies_;
      ++allocated_blocks_;
    }
    const int32_t target = w.BlocksFor(w.num_tokens() + num_new_tokens);
    while (w.num_blocks() < target) {
      const BlockId b = *allocate_device_block();
      w.append_block(b);
      d.window_blocks.push_back(b);
      ++allocated_blocks_;
    }
    w.set_num_tokens(w.num_tokens() + num_new_tokens);
  }
  // Forks share every window table alike, so either all tails were copied or none.
  KVS_CHECK(d.window_cow.empty() || d.window_cow.size() == s.window.size(),
            "window tables shared unevenly");
}

int32_t KvCacheManager::shrink_windows(SequenceKvState& s, int64_t new_num_tokens) {
  int32_t released = 0;
  for (BlockTable& w : s.window) {
    if (new_num_tokens >= w.num_tokens()) continue;
    const int32_t keep = w.BlocksFor(new_num_tokens);
    while (w.num_blocks() > keep) {
      const BlockId b = w.pop_block();  // tail first, as the main table
      if (b == kNullBlock) continue;
      pool_.release(b);
      ++released;
    }
    w.set_num_tokens(new_num_tokens);
  }
  if (!s.window.empty())
    s.window_released_front = std::min(s.window_released_front, s.window[0].num_blocks());
  return released;
}

int32_t KvCacheManager::rollback(SeqId seq, int64_t num_rejected) {
  KVS_CHECK(num_rejected >= 0 && num_rejected <= num_tokens(seq), "rollback of sequence ",
            seq.value(), " by ", num_rejected, " slots, it holds ", num_tokens(seq));
  if (num_rejected == 0) return 0;
  int32_t released = truncate(seq, num_tokens(seq) - num_rejected);
  SequenceKvState& s = *find(seq);
  if (s.window.empty()) return released;
  const int64_t positions = s.window[0].num_tokens() - num_rejected;
  // Guesses come after every released position: the release ran on the verified length.
  KVS_CHECK(static_cast<int64_t>(s.window_released_front) * block_size_ <= positions,
            "rollback of sequence ", seq.value(), " to ", positions,
            " positions, before its released window front");
  return released + shrink_windows(s, positions);
}

std::span<const BlockId> KvCacheManager::window_table(SeqId seq, int group) const {
  const SequenceKvState* s = find(seq);
  if (s == nullptr || group < 0 || static_cast<size_t>(group) >= s->window.size()) return {};
  return s->window[static_cast<size_t>(group)].blocks();
}

}  // namespace kvserve::cache
