#include "cache/block_table.h"

#include <gtest/gtest.h>

#include <numeric>
#include <unordered_set>
#include <vector>

#include "cache/block_hasher.h"

namespace kvserve::cache {
namespace {

TEST(BlockTable, SlotMappingFollowsTheTable) {
  BlockTable t(4);
  EXPECT_EQ(t.BlocksFor(0), 0);
  EXPECT_EQ(t.BlocksFor(1), 1);
  EXPECT_EQ(t.BlocksFor(4), 1);
  EXPECT_EQ(t.BlocksFor(5), 2);
  for (int b : {7, 2, 9}) t.append_block(BlockId{b});
  t.set_num_tokens(10);
  EXPECT_EQ(t.tail_fill(), 2);
  EXPECT_EQ(t.free_slots(), 2);
  EXPECT_EQ(t.num_full_blocks(), 2);
  EXPECT_EQ(t.slot(0), 28);
  EXPECT_EQ(t.slot(5), 9);
  EXPECT_EQ(t.slot(9), 37);
  std::vector<int64_t> slots(6);
  t.slot_mapping(3, slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{31, 8, 9, 10, 11, 36}));
  t.replace_block(2, BlockId{5});
  EXPECT_EQ(t.slot(8), 20);
  EXPECT_EQ(t.pop_block().value(), 5);
  t.set_num_tokens(8);
  EXPECT_EQ(t.tail_fill(), 0);
  t.clear();
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.num_tokens(), 0);
}

TEST(BlockHasher, ChainDependsOnParentTokensAndKey) {
  BlockHasher hasher;
  std::vector<int32_t> a(16), b(16);
  std::iota(a.begin(), a.end(), 100);
  std::iota(b.begin(), b.end(), 100);
  const BlockHash root = hasher.root(MakePrefixKey("model", "tenant", ""));
  EXPECT_EQ(hasher.chain(root, a), hasher.chain(root, b));
  b[15] = 7;
  EXPECT_NE(hasher.chain(root, a), hasher.chain(root, b));
  // Swapping two tokens changes the hash.
  std::vector<int32_t> c = a;
  std::swap(c[3], c[4]);
  EXPECT_NE(hasher.chain(root, a), hasher.chain(root, c));
  // The parent matters: the same block after a different prefix is different content.
  const BlockHash h0 = hasher.chain(root, a);
  EXPECT_NE(hasher.chain(h0, a), hasher.chain(root, a));
  // Extra keys separate models, tenant groups and salts.
  const BlockHash other_model = hasher.root(MakePrefixKey("model2", "tenant", ""));
  const BlockHash other_tenant = hasher.root(MakePrefixKey("model", "tenant2", ""));
  const BlockHash salted = hasher.root(MakePrefixKey("model", "tenant", "salt"));
  const BlockHash swapped_fields = hasher.root(MakePrefixKey("tenant", "model", ""));
  std::unordered_set<uint64_t> roots{root.value(), other_model.value(), other_tenant.value(),
                                     salted.value(), swapped_fields.value()};
  EXPECT_EQ(roots.size(), 5u);
  // The seed is injected: another seed, other hashes.
  EXPECT_NE(BlockHasher(1).chain(root, a), hasher.chain(root, a));
  // Partial (tail) lengths are distinguished from zero padding.
  const std::span<const int32_t> s(a);
  EXPECT_NE(hasher.chain(root, s.first(5)), hasher.chain(root, s.first(6)));
}

TEST(BlockHasher, NoCollisionsOnManyNearbyBlocks) {
  BlockHasher hasher;
  std::unordered_set<uint64_t> seen;
  std::vector<int32_t> tokens(16, 0);
  const BlockHash root = hasher.root({});
  int n = 0;
  for (int pos = 0; pos < 16; ++pos) {
    for (int v = 0; v < 4000; ++v) {
      tokens.assign(16, 0);
      tokens[pos] = v;
      const BlockHash h = hasher.chain(root, tokens);
      EXPECT_NE(h, kNoHash);
      seen.insert(h.value());
      ++n;
    }
  }
  // Each (pos, v=0) vector is the same all-zero block: 15 duplicates expected.
  EXPECT_EQ(seen.size(), static_cast<size_t>(n - 15));
}

}  // namespace
}  // namespace kvserve::cache
