#include "cache/block_pool.h"

#include <limits>

namespace kvserve::cache {

BlockPool::BlockPool(int32_t num_blocks)
    : refcount_(num_blocks, 0), hash_(num_blocks, kNoHash), free_(num_blocks), index_(num_blocks) {
  KVS_CHECK(num_blocks >= 2, "a block pool needs the null block and one more, got ", num_blocks);
  // The null block holds a permanent reference so that it can never look free.
  refcount_[kNullBlock.value()] = std::numeric_limits<int32_t>::max() / 2;
  for (int32_t i = 1; i < num_blocks; ++i) free_.push_back(BlockId{i});
}

void BlockPool::publish(BlockId b, BlockHash h) {
  const int32_t i = checked(b);
  KVS_CHECK(refcount_[i] > 0, "publishing free block ", i);
  KVS_CHECK(hash_[i] == kNoHash, "block ", i, " already holds a hash");
  KVS_CHECK(h != kNoHash, "publishing block ", i, " with no hash");
  hash_[i] = h;
  index_.insert(h, b);
}

void BlockPool::unpublish(BlockId b) {
  const int32_t i = checked(b);
  KVS_CHECK(refcount_[i] > 0, "unpublishing free block ", i);
  if (hash_[i] == kNoHash) return;
  index_.erase(hash_[i], b);
  hash_[i] = kNoHash;
}

}  // namespace kvserve::cache
