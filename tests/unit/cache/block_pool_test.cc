#include "cache/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "cache/free_block_queue.h"
#include "cache/prefix_index.h"
#include "cache/swap_space.h"

namespace kvserve::cache {
namespace {

std::vector<int32_t> Order(const FreeBlockQueue& q) {
  std::vector<int32_t> out;
  q.for_each([&](BlockId b) { out.push_back(b.value()); });
  return out;
}

TEST(FreeBlockQueue, PushPopAndRemoveFromTheMiddle) {
  FreeBlockQueue q(8);
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.pop_front().has_value());
  for (int i : {3, 5, 7, 1}) q.push_back(BlockId{i});
  q.push_front(BlockId{2});
  EXPECT_EQ(Order(q), (std::vector<int32_t>{2, 3, 5, 7, 1}));
  EXPECT_EQ(q.size(), 5);
  q.remove(BlockId{5});  // middle
  q.remove(BlockId{1});  // back
  q.remove(BlockId{2});  // front
  EXPECT_EQ(Order(q), (std::vector<int32_t>{3, 7}));
  EXPECT_FALSE(q.contains(BlockId{5}));
  EXPECT_TRUE(q.contains(BlockId{7}));
  EXPECT_EQ(q.pop_front()->value(), 3);
  EXPECT_EQ(q.pop_front()->value(), 7);
  EXPECT_TRUE(q.empty());
  q.push_back(BlockId{5});  // a removed block can come back
  EXPECT_EQ(Order(q), (std::vector<int32_t>{5}));
}

TEST(PrefixIndex, MultimapKeepsDuplicatesFindable) {
  PrefixIndex idx(10);
  const BlockHash h1{111}, h2{222};
  idx.insert(h1, BlockId{3});
  idx.insert(h1, BlockId{4});  // same content in two blocks: both kept
  idx.insert(h2, BlockId{5});
  EXPECT_EQ(idx.size(), 3);
  EXPECT_EQ(idx.find(h1)->value(), 4);  // newest first
  idx.erase(h1, BlockId{4});
  EXPECT_EQ(idx.find(h1)->value(), 3);
  idx.insert(h1, BlockId{6});
  idx.erase(h1, BlockId{3});  // not the head
  EXPECT_EQ(idx.find(h1)->value(), 6);
  idx.erase(h1, BlockId{6});
  EXPECT_FALSE(idx.find(h1).has_value());
  EXPECT_EQ(idx.find(h2)->value(), 5);
  EXPECT_EQ(idx.size(), 1);
  int visited = 0;
  idx.for_each([&](BlockHash h, BlockId b) {
    ++visited;
    EXPECT_EQ(h, h2);
    EXPECT_EQ(b.value(), 5);
  });
  EXPECT_EQ(visited, 1);
}

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_usable(), 3);
  std::vector<int32_t> got;
  while (auto b = pool.allocate()) got.push_back(b->value());
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 3);
  EXPECT_FALSE(pool.is_free(kNullBlock));
}

TEST(BlockPool, RefcountsAndFreeQueueOrder) {
  BlockPool pool(6);  // usable 1..5
  const BlockId a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.refcount(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_FALSE(pool.is_free(b));
  // Hashed blocks go to the back (LRU), unhashed ones to the front (no reuse value).
  pool.publish(a, BlockHash{10});
  pool.publish(c, BlockHash{30});
  pool.release(c);
  pool.release(b);
  pool.release(a);
  EXPECT_EQ(Order(pool.free_queue()), (std::vector<int32_t>{2, 4, 5, 3, 1}));
  EXPECT_EQ(pool.num_cached_free(), 2);
  EXPECT_EQ(pool.num_free(), 5);
}

TEST(BlockPool, FreedHashedBlocksStayFindableUntilEvicted) {
  BlockPool pool(3);  // usable 1, 2
  const BlockId a = *pool.allocate();
  pool.publish(a, BlockHash{42});
  pool.release(a);
  ASSERT_TRUE(pool.find_cached(BlockHash{42}).has_value());
  // A hit on a free block pulls it out of the free queue.
  pool.retain(a);
  EXPECT_FALSE(pool.is_free(a));
  EXPECT_EQ(pool.num_cached_free(), 0);
  pool.release(a);
  EXPECT_EQ(pool.num_evictions(), 0u);
  // Allocating both blocks: the unhashed one first, then the cached one is evicted.
  const BlockId first = *pool.allocate();
  EXPECT_NE(first, a);
  EXPECT_TRUE(pool.find_cached(BlockHash{42}).has_value());
  const BlockId second = *pool.allocate();
  EXPECT_EQ(second, a);
  EXPECT_FALSE(pool.find_cached(BlockHash{42}).has_value());
  EXPECT_EQ(pool.hash(a), kNoHash);
  EXPECT_EQ(pool.num_evictions(), 1u);
  EXPECT_FALSE(pool.allocate().has_value());
}

TEST(BlockPool, UnpublishForgetsContent) {
  BlockPool pool(3);
  const BlockId a = *pool.allocate();
  pool.publish(a, BlockHash{7});
  pool.unpublish(a);
  EXPECT_FALSE(pool.find_cached(BlockHash{7}).has_value());
  EXPECT_EQ(pool.index().size(), 0);
  pool.unpublish(a);  // no hash: no-op
  pool.release(a);
  EXPECT_EQ(pool.num_cached_free(), 0);
}

TEST(SwapSpace, AllOrNothingAllocation) {
  SwapSpace swap(4);
  std::vector<BlockId> got;
  EXPECT_TRUE(swap.allocate(3, got));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(swap.num_free(), 1);
  EXPECT_FALSE(swap.allocate(2, got));  // would need 2, has 1: nothing taken
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(swap.num_free(), 1);
  for (BlockId b : got) EXPECT_FALSE(swap.is_free(b));
  swap.release(got);
  EXPECT_EQ(swap.num_free(), 4);
  EXPECT_EQ(swap.num_used(), 0);
  SwapSpace none(0);
  std::vector<BlockId> empty;
  EXPECT_TRUE(none.allocate(0, empty));
  EXPECT_FALSE(none.allocate(1, empty));
}

}  // namespace
}  // namespace kvserve::cache
