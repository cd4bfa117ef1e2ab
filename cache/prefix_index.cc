#include "cache/prefix_index.h"

#include "base/check.h"

namespace kvserve::cache {

PrefixIndex::PrefixIndex(int32_t num_blocks) : next_(num_blocks, kEnd) {
  head_.reserve(static_cast<size_t>(num_blocks));
}

void PrefixIndex::insert(BlockHash hash, BlockId block) {
  KVS_DCHECK(hash != kNoHash, "indexing block ", block.value(), " without a hash");
  auto [it, inserted] = head_.try_emplace(hash.value(), block.value());
  if (!inserted) {
    // Duplicate content: the new block becomes the chain's head (newest first).
    next_[block.value()] = it->second;
    it->second = block.value();
  } else {
    next_[block.value()] = kEnd;
  }
  ++size_;
}

void PrefixIndex::erase(BlockHash hash, BlockId block) {
  auto it = head_.find(hash.value());
  KVS_CHECK(it != head_.end(), "hash of block ", block.value(), " is not indexed");
  const int32_t b = block.value();
  if (it->second == b) {
    if (next_[b] == kEnd) {
      head_.erase(it);
    } else {
      it->second = next_[b];
    }
  } else {
    // Duplicates are rare and chains short: a linear walk is cheaper than a prev array.
    int32_t cur = it->second;
    while (next_[cur] != b) {
      KVS_CHECK(next_[cur] != kEnd, "block ", b, " is not in its hash chain");
      cur = next_[cur];
    }
    next_[cur] = next_[b];
  }
  next_[b] = kEnd;
  --size_;
}

}  // namespace kvserve::cache
