// Demotion tier pools in the cache manager (issue 18): grants are all or nothing and "no room"
// is an answer, a granted block has one holder until the sequence is freed (no leak: the
// invariant checker walks the tier pools), sequences holding tier blocks are recomputed
// rather than swapped, and the main pool's accounting does not move.
#include <gtest/gtest.h>

#include <vector>

#include "cache/cache_invariants.h"
#include "cache/host_kv_cache.h"
#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {

// Reaches into the manager to break invariants on purpose.
struct KvCacheManagerTestPeer {
  static BlockPool& pool(KvCacheManager& m) { return m.pool_; }
  static SequenceKvState& state(KvCacheManager& m, SeqId s) { return *m.find(s); }
};

namespace {

#define EXPECT_INVARIANTS(m) EXPECT_TRUE(CheckCacheInvariants(m).ok()) << CheckCacheInvariants(m)

std::unique_ptr<KvCacheManager> Make(std::vector<int32_t> tiers, int32_t host_blocks = 8) {
  KvCacheManagerOptions o;
  o.layout = testing::SmallLayout(config::KvDtype::kFp32, 4);
  o.num_blocks = 9;
  o.num_host_blocks = host_blocks;
  o.demote_tier_blocks = std::move(tiers);
  return std::make_unique<KvCacheManager>(o, base::Logger());
}

TEST(DemoteTierBlocks, GrantsAreAllOrNothingAndFreedWithTheSequence) {
  auto m = Make({4, 2});
  ASSERT_EQ(m->num_demote_tiers(), 2);
  const SeqId a{1}, b{2};
  ASSERT_TRUE(m->allocate(a, 5).has_value());
  ASSERT_TRUE(m->allocate(b, 5).has_value());
  const CacheUsage before = m->usage();

  const auto g = m->reserve_tier_blocks(a, 0, 3);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->size(), 3u);
  EXPECT_EQ(m->tier_blocks(a, 0).size(), 3u);
  EXPECT_INVARIANTS(*m);
  // 2 asked, 1 free: nothing taken.
  EXPECT_FALSE(m->reserve_tier_blocks(b, 0, 2).has_value());
  EXPECT_TRUE(m->tier_blocks(b, 0).empty());
  EXPECT_EQ(m->tier_pool(0).num_free(), 1);
  ASSERT_TRUE(m->reserve_tier_blocks(b, 1, 2).has_value());
  EXPECT_EQ(m->usage().demote_used_blocks, 5);
  EXPECT_EQ(m->usage().demote_total_blocks, 6);
  // The main pool does not see tier blocks.
  EXPECT_EQ(m->usage().used_blocks, before.used_blocks);
  EXPECT_EQ(m->usage().free_blocks, before.free_blocks);
  EXPECT_INVARIANTS(*m);

  // Truncation (a compression round) keeps the grant; freeing returns every block.
  EXPECT_EQ(m->truncate(a, 4), 1);
  EXPECT_EQ(m->tier_blocks(a, 0).size(), 3u);
  m->free(a);
  EXPECT_EQ(m->tier_pool(0).num_free(), 4);
  EXPECT_TRUE(m->tier_blocks(a, 0).empty());
  m->free(b);
  EXPECT_EQ(m->usage().demote_used_blocks, 0);
  EXPECT_INVARIANTS(*m);
  // A recycled sequence slot starts without tier blocks.
  ASSERT_TRUE(m->allocate(SeqId{3}, 2).has_value());
  EXPECT_TRUE(m->tier_blocks(SeqId{3}, 0).empty());
  EXPECT_TRUE(m->tier_blocks(SeqId{3}, 1).empty());
  EXPECT_INVARIANTS(*m);
}

TEST(DemoteTierBlocks, HoldersAreRecomputedNotSwapped) {
  auto m = Make({4});
  const SeqId a{1}, b{2};
  ASSERT_TRUE(m->allocate(a, 5).has_value());
  ASSERT_TRUE(m->allocate(b, 5).has_value());
  EXPECT_TRUE(m->can_swap_out(a));
  ASSERT_TRUE(m->reserve_tier_blocks(a, 0, 1).has_value());
  EXPECT_FALSE(m->can_swap_out(a));
  EXPECT_FALSE(m->swap_out(a).has_value());
  EXPECT_TRUE(m->can_swap_out(b));
  EXPECT_INVARIANTS(*m);
}

TEST(DemoteTierBlocks, TheCheckerCatchesALeakAndADoubleGrant) {
  auto m = Make({4});
  const SeqId a{1}, b{2};
  ASSERT_TRUE(m->allocate(a, 5).has_value());
  ASSERT_TRUE(m->allocate(b, 5).has_value());
  ASSERT_TRUE(m->reserve_tier_blocks(a, 0, 2).has_value());
  // Forgetting a granted block (a leak) breaks the refcount <-> holders invariant.
  SequenceKvState& sa = KvCacheManagerTestPeer::state(*m, a);
  const BlockId lost = sa.tier_blocks[0].back();
  sa.tier_blocks[0].pop_back();
  EXPECT_FALSE(CheckCacheInvariants(*m).ok());
  sa.tier_blocks[0].push_back(lost);
  EXPECT_INVARIANTS(*m);
  // The same block held by two sequences.
  SequenceKvState& sb = KvCacheManagerTestPeer::state(*m, b);
  sb.tier_blocks.resize(1);
  sb.tier_blocks[0].push_back(lost);
  EXPECT_FALSE(CheckCacheInvariants(*m).ok());
  sb.tier_blocks[0].clear();
  EXPECT_INVARIANTS(*m);
}

TEST(DemoteTierBlocks, HostCacheSplitsTheBudgetIntoTierPools) {
  config::CacheConfig c;
  c.block_size = 16;
  c.kv_bytes = 8 << 20;
  c.host_swap_bytes = 0;
  c.demote_kv_bytes = 2 << 20;
  c.demote_dtypes = {config::KvDtype::kInt8, config::KvDtype::kInt4};
  KvLayout dims;
  dims.num_layers = 4;
  dims.num_kv_heads = 2;
  dims.head_dim = 48;
  auto kv = MakeHostKvCache(c, dims, base::Logger());
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_EQ(kv->demote_tiers.size(), 2u);
  const KvLayout& pool = kv->storage->layout();
  EXPECT_EQ(kv->manager->block_pool().num_usable(), static_cast<int32_t>((6u << 20) / pool.bytes_per_block()));
  for (size_t t = 0; t < 2; ++t) {
    const KvLayout& tl = kv->demote_tiers[t]->layout();
    EXPECT_EQ(tl.k_dtype(), c.demote_dtypes[t]);
    EXPECT_EQ(tl.v_dtype(), c.demote_dtypes[t]);
    EXPECT_LT(tl.bytes_per_block(), pool.bytes_per_block());
    EXPECT_EQ(kv->manager->tier_pool(static_cast<int>(t)).num_usable(),
              static_cast<int32_t>((1u << 20) / tl.bytes_per_block()));
    EXPECT_EQ(kv->demote_tiers[t]->num_blocks(), kv->manager->tier_pool(static_cast<int>(t)).num_blocks());
  }
}

}  // namespace
}  // namespace kvserve::cache
