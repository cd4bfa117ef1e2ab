#include "cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <vector>

#include "cache/cache_invariants.h"
#include "config/fields.h"
#include "cache/host_kv_storage.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {

// Reaches into the manager to break invariants on purpose.
struct KvCacheManagerTestPeer {
  static BlockPool& pool(KvCacheManager& m) { return m.pool_; }
  static SequenceKvState& state(KvCacheManager& m, SeqId s) { return *m.find(s); }
};

namespace {

using testing::MakeManager;
using testing::Tokens;

std::vector<int32_t> Ids(std::span<const BlockId> blocks) {
  std::vector<int32_t> out;
  for (BlockId b : blocks) out.push_back(b.value());
  return out;
}

#define EXPECT_INVARIANTS(m) EXPECT_TRUE(CheckCacheInvariants(m).ok()) << CheckCacheInvariants(m)

const PrefixKey kKey = MakePrefixKey("model", "tenant-a", "");

TEST(KvCacheManager, AllocateAppendsSlotsAndNoRoomIsAnAnswer) {
  auto m = MakeManager(/*num_blocks=*/4, /*block_size=*/4);
  const SeqId s{1};
  ASSERT_TRUE(m->can_allocate(s, 10));
  EXPECT_EQ(m->blocks_needed(s, 10), 3);
  auto d = m->allocate(s, 10);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->first_pos, 0);
  EXPECT_EQ(d->num_tokens, 10);
  EXPECT_EQ(d->first_changed_block, 0);
  EXPECT_EQ(d->blocks.size(), 3u);
  EXPECT_FALSE(d->cow.has_value());
  EXPECT_EQ(m->num_tokens(s), 10);
  EXPECT_EQ(m->block_table(s).size(), 3u);
  EXPECT_EQ(m->slot(s, 9), m->block_table(s)[2].value() * 4 + 1);

  // Two more tokens fit in the tail block: no new block.
  d = m->allocate(s, 2);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->blocks.empty());
  EXPECT_EQ(d->first_pos, 10);
  EXPECT_EQ(m->usage().used_blocks, 3);

  // 5 more tokens need 2 blocks; only 1 is free: no room, and nothing changes.
  EXPECT_FALSE(m->can_allocate(s, 5));
  EXPECT_FALSE(m->allocate(s, 5).has_value());
  EXPECT_EQ(m->num_tokens(s), 12);
  EXPECT_EQ(m->usage().free_blocks, 1);
  // A new sequence that does not fit is not even created.
  EXPECT_FALSE(m->allocate(SeqId{2}, 8).has_value());
  EXPECT_FALSE(m->contains(SeqId{2}));
  ASSERT_TRUE(m->allocate(s, 4).has_value());
  EXPECT_EQ(m->usage().free_blocks, 0);
  EXPECT_EQ(m->usage().allocated_blocks, 4u);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, FreeIsIdempotent) {
  auto m = MakeManager(8);
  const SeqId s{1};
  ASSERT_TRUE(m->allocate(s, 9).has_value());
  EXPECT_EQ(m->free(s), 3);
  EXPECT_EQ(m->free(s), 0);
  EXPECT_EQ(m->free(SeqId{99}), 0);
  EXPECT_FALSE(m->contains(s));
  EXPECT_EQ(m->usage().free_blocks, 8);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, ForkSharesBlocksAndCopiesTheTailOnWrite) {
  auto m = MakeManager(8);
  const SeqId parent{1}, child{2};
  ASSERT_TRUE(m->allocate(parent, 6).has_value());  // block A full, block B 2/4
  const std::vector<int32_t> before = Ids(m->block_table(parent));
  m->fork(parent, child);
  EXPECT_EQ(Ids(m->block_table(child)), before);
  EXPECT_EQ(m->block_pool().refcount(BlockId{before[0]}), 2);
  EXPECT_EQ(m->usage().used_blocks, 2);
  EXPECT_INVARIANTS(*m);

  // The child writes into the shared tail: it gets a private copy first.
  EXPECT_EQ(m->blocks_needed(child, 1), 1);
  auto d = m->allocate(child, 1);
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(d->cow.has_value());
  EXPECT_EQ(d->cow->src.value(), before[1]);
  EXPECT_EQ(d->cow->dst, d->blocks[0]);
  EXPECT_EQ(d->first_changed_block, 1);
  EXPECT_EQ(m->block_table(child)[0].value(), before[0]);  // the full block stays shared
  EXPECT_EQ(m->block_table(child)[1], d->cow->dst);
  EXPECT_EQ(Ids(m->block_table(parent)), before);
  EXPECT_EQ(m->usage().cow_copies, 1u);

  // The parent's tail is private again: no copy.
  d = m->allocate(parent, 1);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->cow.has_value());
  EXPECT_TRUE(d->blocks.empty());
  EXPECT_INVARIANTS(*m);

  // A full shared tail needs no copy: the next token opens a fresh block.
  const SeqId p2{3}, c2{4};
  ASSERT_TRUE(m->allocate(p2, 4).has_value());
  m->fork(p2, c2);
  d = m->allocate(c2, 1);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->cow.has_value());
  EXPECT_EQ(d->blocks.size(), 1u);
  EXPECT_EQ(d->first_changed_block, 1);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, TruncateFreesTrailingBlocks) {
  auto m = MakeManager(8);
  const SeqId s{1};
  const std::vector<int32_t> toks = Tokens(14);
  m->match_prefix(s, toks, kKey);
  ASSERT_TRUE(m->allocate(s, 14).has_value());  // 4 blocks
  m->commit_full_blocks(s, toks);
  EXPECT_EQ(m->num_committed_blocks(s), 3);
  EXPECT_EQ(m->truncate(s, 14), 0);
  EXPECT_EQ(m->truncate(s, 6), 2);  // keeps blocks 0 and 1 (the latter now 2/4 full)
  EXPECT_EQ(m->num_tokens(s), 6);
  EXPECT_EQ(m->num_committed_blocks(s), 1);
  EXPECT_EQ(m->usage().used_blocks, 2);
  EXPECT_INVARIANTS(*m);
  // Block 1 was published full; writing into it again first withdraws it from the cache.
  const BlockId b1 = m->block_table(s)[1];
  EXPECT_NE(m->block_pool().hash(b1), kNoHash);
  auto d = m->allocate(s, 1);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->cow.has_value());
  EXPECT_EQ(m->block_pool().hash(b1), kNoHash);
  EXPECT_EQ(m->truncate(s, 0), 2);
  EXPECT_TRUE(m->block_table(s).empty());
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, TruncateIntoASharedPublishedBlockCopiesOnWrite) {
  auto m = MakeManager(8);
  const std::vector<int32_t> toks = Tokens(9);
  const SeqId a{1}, b{2};
  m->match_prefix(a, toks, kKey);
  ASSERT_TRUE(m->allocate(a, 9).has_value());
  m->commit_full_blocks(a, toks);
  // b hits a's two full blocks.
  EXPECT_EQ(m->match_prefix(b, toks, kKey).num_blocks, 2);
  ASSERT_TRUE(m->allocate(b, 1).has_value());
  // Compression cuts a back into its shared second block; a's next write must not touch
  // the block b (and the prefix cache) still reads.
  m->truncate(a, 6);
  const BlockId shared = m->block_table(a)[1];
  auto d = m->allocate(a, 1);
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(d->cow.has_value());
  EXPECT_EQ(d->cow->src, shared);
  EXPECT_NE(m->block_pool().hash(shared), kNoHash);
  EXPECT_EQ(m->block_table(b)[1], shared);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, PrefixHitAllocatesOnlyPastTheShared512Tokens) {
  constexpr int kBs = 16;
  auto m = MakeManager(/*num_blocks=*/256, kBs);
  std::vector<int32_t> shared = Tokens(512, 5);
  std::vector<int32_t> a = shared, b = shared;
  for (int i = 0; i < 100; ++i) a.push_back(70000 + i);
  for (int i = 0; i < 50; ++i) b.push_back(90000 + i);

  const PrefixMatch miss = m->match_prefix(SeqId{1}, a, kKey);
  EXPECT_EQ(miss.num_tokens, 0);
  ASSERT_TRUE(m->allocate(SeqId{1}, static_cast<int>(a.size())).has_value());
  m->commit_full_blocks(SeqId{1}, a);
  const CacheUsage u0 = m->usage();
  EXPECT_EQ(u0.allocated_blocks, 39u);  // ceil(612 / 16)

  const PrefixMatch hit = m->match_prefix(SeqId{2}, b, kKey);
  EXPECT_EQ(hit.num_blocks, 32);
  EXPECT_EQ(hit.num_tokens, 512);
  ASSERT_TRUE(m->allocate(SeqId{2}, static_cast<int>(b.size() - hit.num_tokens)).has_value());
  const CacheUsage u1 = m->usage();
  EXPECT_EQ(u1.allocated_blocks - u0.allocated_blocks, 4u);  // ceil(50 / 16): only the new part
  EXPECT_EQ(u1.prefix_queries, 2u);
  EXPECT_EQ(u1.prefix_hit_blocks, 32u);
  EXPECT_EQ(u1.prefix_hit_tokens, 512u);
  EXPECT_EQ(u1.prefix_query_tokens, a.size() + b.size());
  EXPECT_EQ(u1.used_blocks, 39 + 4);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(m->block_table(SeqId{2})[i], m->block_table(SeqId{1})[i]);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, HitIsCappedAtPromptLengthMinusOne) {
  auto m = MakeManager(64, 16);
  const std::vector<int32_t> p = Tokens(64);
  m->match_prefix(SeqId{1}, p, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 64).has_value());
  m->commit_full_blocks(SeqId{1}, p);
  EXPECT_EQ(m->num_committed_blocks(SeqId{1}), 4);
  // Same 64-token prompt: at most 63 tokens may hit, i.e. 3 full blocks.
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, kKey).num_tokens, 48);
  // 65 tokens: all 4 blocks.
  std::vector<int32_t> longer = p;
  longer.push_back(1);
  EXPECT_EQ(m->match_prefix(SeqId{3}, longer, kKey).num_tokens, 64);
  // Shorter than a block: nothing.
  EXPECT_EQ(m->match_prefix(SeqId{4}, std::span(p).first(16), kKey).num_tokens, 0);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, TenantsAreIsolatedUnlessTheyShareAGroup) {
  auto m = MakeManager(64, 16);
  const std::vector<int32_t> p = Tokens(100);
  m->match_prefix(SeqId{1}, p, MakePrefixKey("model", "acme", ""));
  ASSERT_TRUE(m->allocate(SeqId{1}, 100).has_value());
  m->commit_full_blocks(SeqId{1}, p);
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, MakePrefixKey("model", "globex", "")).num_blocks, 0);
  EXPECT_EQ(m->match_prefix(SeqId{3}, p, MakePrefixKey("model2", "acme", "")).num_blocks, 0);
  EXPECT_EQ(m->match_prefix(SeqId{4}, p, MakePrefixKey("model", "acme", "salt")).num_blocks, 0);
  EXPECT_EQ(m->match_prefix(SeqId{5}, p, MakePrefixKey("model", "acme", "")).num_blocks, 6);
  // A salted request is only hit by requests with the same salt.
  m->free(SeqId{4});
  m->match_prefix(SeqId{4}, p, MakePrefixKey("model", "acme", "salt"));
  ASSERT_TRUE(m->allocate(SeqId{4}, 100).has_value());
  m->commit_full_blocks(SeqId{4}, p);
  EXPECT_EQ(m->match_prefix(SeqId{6}, p, MakePrefixKey("model", "acme", "salt")).num_blocks, 6);
  EXPECT_EQ(m->match_prefix(SeqId{7}, p, MakePrefixKey("model", "acme", "other")).num_blocks, 0);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, FreedBlocksStayCachedUntilEvicted) {
  auto m = MakeManager(/*num_blocks=*/6, 4);
  const std::vector<int32_t> p = Tokens(13);  // 3 full blocks + 1
  m->match_prefix(SeqId{1}, p, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 13).has_value());
  m->commit_full_blocks(SeqId{1}, p);
  m->free(SeqId{1});
  EXPECT_EQ(m->usage().cached_free_blocks, 3);
  EXPECT_EQ(m->usage().free_blocks, 6);
  // Still a hit after the owner is gone.
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, kKey).num_blocks, 3);
  m->free(SeqId{2});
  // Three blocks without cached content are reused first: no eviction yet.
  ASSERT_TRUE(m->allocate(SeqId{3}, 12).has_value());
  EXPECT_EQ(m->usage().evicted_blocks, 0u);
  EXPECT_EQ(m->match_prefix(SeqId{4}, p, kKey).num_blocks, 3);
  m->free(SeqId{4});
  // One more block evicts the tail of the chain first (freed tail first): the first two
  // blocks still hit.
  ASSERT_TRUE(m->allocate(SeqId{5}, 4).has_value());
  EXPECT_EQ(m->usage().evicted_blocks, 1u);
  EXPECT_EQ(m->match_prefix(SeqId{6}, p, kKey).num_blocks, 2);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, PublishLimitKeepsEvictableBlocksOutOfTheCache) {
  auto m = MakeManager(16, 4);
  const std::vector<int32_t> p = Tokens(17);
  m->match_prefix(SeqId{1}, p, kKey);
  m->set_publish_limit(SeqId{1}, 9);  // only blocks 0 and 1 lie entirely before token 9
  ASSERT_TRUE(m->allocate(SeqId{1}, 17).has_value());
  m->commit_full_blocks(SeqId{1}, p);
  EXPECT_EQ(m->num_committed_blocks(SeqId{1}), 2);
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, kKey).num_blocks, 2);
  // The limit can be set before the sequence holds anything (it is created).
  m->set_publish_limit(SeqId{3}, 4);
  EXPECT_TRUE(m->contains(SeqId{3}));
  EXPECT_EQ(m->match_prefix(SeqId{3}, p, kKey).num_blocks, 2);
  ASSERT_TRUE(m->allocate(SeqId{3}, 1).has_value());
  m->commit_full_blocks(SeqId{3}, p);
  EXPECT_EQ(m->num_committed_blocks(SeqId{3}), 2);  // hits stay committed past the limit
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, NoPrefixCachingMeansNoHitsAndNoHashes) {
  auto m = MakeManager(16, 4, 0, /*prefix=*/false);
  const std::vector<int32_t> p = Tokens(17);
  m->match_prefix(SeqId{1}, p, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 17).has_value());
  m->commit_full_blocks(SeqId{1}, p);
  EXPECT_EQ(m->num_committed_blocks(SeqId{1}), 0);
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, kKey).num_blocks, 0);
  EXPECT_EQ(m->block_pool().index().size(), 0);
  EXPECT_INVARIANTS(*m);
}

// Sliding-window release: leading blocks go back to the pool (published ones stay cached
// and hit), the table keeps kNullBlock in their place with slots unchanged, uncommitted
// blocks stay while prefix caching is on, forks share the null front, truncate and free
// release the rest, and such a sequence is never swapped.
TEST(KvCacheManager, ReleaseBeforeDropsLeadingBlocksOnly) {
  auto m = MakeManager(/*num_blocks=*/10, 4, /*host_blocks=*/8);
  const std::vector<int32_t> p = Tokens(22);
  m->match_prefix(SeqId{1}, p, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 22).has_value());
  const int64_t slot_21 = m->slot(SeqId{1}, 21);
  const BlockId first = m->block_table(SeqId{1})[0];
  m->commit_full_blocks(SeqId{1}, std::span<const int32_t>(p).first(12));  // blocks 0-2 published
  EXPECT_EQ(m->release_before(SeqId{1}, 21), 3);  // blocks 3 and 4 are full but uncommitted
  EXPECT_INVARIANTS(*m);
  EXPECT_EQ(m->block_table(SeqId{1})[0], kNullBlock);
  EXPECT_EQ(m->block_table(SeqId{1})[2], kNullBlock);
  EXPECT_NE(m->block_table(SeqId{1})[3], kNullBlock);
  EXPECT_EQ(m->slot(SeqId{1}, 21), slot_21);
  EXPECT_EQ(m->usage().used_blocks, 3);
  EXPECT_EQ(m->usage().window_released_blocks, 3u);
  EXPECT_EQ(m->kv_bytes_held(SeqId{1}), 3 * static_cast<int64_t>(m->bytes_per_block()));
  EXPECT_FALSE(m->can_swap_out(SeqId{1}));
  // Released published blocks are still prefix hits for a new request.
  EXPECT_EQ(m->match_prefix(SeqId{2}, p, kKey).num_blocks, 3);
  EXPECT_EQ(m->block_table(SeqId{2})[0], first);
  m->free(SeqId{2});
  m->commit_full_blocks(SeqId{1}, p);
  EXPECT_EQ(m->release_before(SeqId{1}, 21), 2);
  EXPECT_EQ(m->release_before(SeqId{1}, 21), 0);  // idempotent
  m->fork(SeqId{1}, SeqId{3});
  EXPECT_INVARIANTS(*m);
  EXPECT_EQ(m->usage().used_blocks, 1);  // the shared tail
  EXPECT_EQ(m->truncate(SeqId{3}, 18), 1);  // the shared tail (one reference dropped)
  EXPECT_EQ(m->truncate(SeqId{3}, 16), 0);  // a released entry: nothing left to drop
  EXPECT_INVARIANTS(*m);
  m->free(SeqId{3});
  EXPECT_EQ(m->free(SeqId{1}), 1);
  EXPECT_EQ(m->usage().used_blocks, 0);
  EXPECT_INVARIANTS(*m);
  // Without prefix caching every full block before the point goes.
  auto n = MakeManager(10, 4, 0, /*prefix=*/false);
  ASSERT_TRUE(n->allocate(SeqId{1}, 22).has_value());
  EXPECT_EQ(n->release_before(SeqId{1}, 21), 5);
  EXPECT_EQ(n->release_before(SeqId{1}, 100), 0);  // never the partial tail
  EXPECT_INVARIANTS(*n);
}

TEST(KvCacheManager, SwapOutAndInRestoresTheData) {
  using testing::VerifyPattern;
  using testing::WritePattern;
  for (config::KvDtype dtype : {config::KvDtype::kFp32, config::KvDtype::kInt8}) {
    auto m = MakeManager(/*num_blocks=*/6, 4, /*host_blocks=*/4, true, dtype);
    auto dev = HostKvStorage::Create(testing::SmallLayout(dtype), 7);
    auto host = HostKvStorage::Create(testing::SmallLayout(dtype), 4);
    ASSERT_TRUE(dev.ok() && host.ok());
    const SeqId s{1}, other{2};
    const std::vector<int32_t> toks = Tokens(14, 40);
    m->match_prefix(s, toks, kKey);
    ASSERT_TRUE(m->allocate(s, 14).has_value());
    WritePattern(**dev, *m, s, toks, 0, 14);
    m->commit_full_blocks(s, toks);
    ASSERT_EQ(VerifyPattern(**dev, *m, s, toks), "");

    ASSERT_TRUE(m->can_swap_out(s));
    auto out = m->swap_out(s);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->size(), 4u);
    ASSERT_TRUE((*dev)->copy_blocks_to(**host, *out).ok());
    EXPECT_TRUE(m->is_swapped(s));
    EXPECT_TRUE(m->block_table(s).empty());
    EXPECT_EQ(m->num_tokens(s), 14);
    EXPECT_EQ(m->usage().swap_used_blocks, 4);
    EXPECT_INVARIANTS(*m);

    // Another sequence takes every device block and overwrites them.
    const std::vector<int32_t> junk = Tokens(24, 9000);
    ASSERT_TRUE(m->allocate(other, 24).has_value());
    WritePattern(**dev, *m, other, junk, 0, 24);
    EXPECT_FALSE(m->can_swap_in(s));
    EXPECT_FALSE(m->swap_in(s).has_value());
    m->free(other);

    auto in = m->swap_in(s);
    ASSERT_TRUE(in.has_value());
    ASSERT_TRUE((*host)->copy_blocks_to(**dev, *in).ok());
    EXPECT_FALSE(m->is_swapped(s));
    EXPECT_EQ(m->num_tokens(s), 14);
    EXPECT_EQ(VerifyPattern(**dev, *m, s, toks), "") << std::string(config::Name(dtype));
    // The host blocks the swap-in reads are free again from the next step on.
    EXPECT_EQ(m->host_quarantine().size(), 4u);
    m->begin_step();
    EXPECT_EQ(m->usage().swap_used_blocks, 0);
    EXPECT_EQ(m->usage().swapped_out_blocks, 4u);
    EXPECT_EQ(m->usage().swapped_in_blocks, 4u);
    EXPECT_INVARIANTS(*m);
    // The restored committed blocks are findable again.
    EXPECT_EQ(m->match_prefix(SeqId{3}, toks, kKey).num_blocks, 3);
  }
}

TEST(KvCacheManager, SwapInReusesBlocksStillCached) {
  auto m = MakeManager(16, 4, /*host_blocks=*/8);
  const std::vector<int32_t> toks = Tokens(10);
  m->match_prefix(SeqId{1}, toks, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 10).has_value());
  m->commit_full_blocks(SeqId{1}, toks);
  ASSERT_TRUE(m->swap_out(SeqId{1}).has_value());
  // Nothing evicted the freed device blocks: the 2 full blocks come back without a copy.
  auto in = m->swap_in(SeqId{1});
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->size(), 1u);
  EXPECT_EQ(m->usage().swap_in_reused_blocks, 2u);
  EXPECT_INVARIANTS(*m);
}

TEST(KvCacheManager, SwapIsRefusedWhenDisabledOrFull) {
  auto none = MakeManager(8, 4, /*host_blocks=*/0);
  ASSERT_TRUE(none->allocate(SeqId{1}, 4).has_value());
  EXPECT_FALSE(none->can_swap_out(SeqId{1}));
  EXPECT_FALSE(none->swap_out(SeqId{1}).has_value());
  EXPECT_FALSE(none->is_swapped(SeqId{1}));

  auto small = MakeManager(8, 4, /*host_blocks=*/2);
  ASSERT_TRUE(small->allocate(SeqId{1}, 12).has_value());
  EXPECT_FALSE(small->swap_out(SeqId{1}).has_value());
  EXPECT_EQ(small->block_table(SeqId{1}).size(), 3u);
  // Freeing a swapped-out sequence returns its host blocks.
  ASSERT_TRUE(small->allocate(SeqId{2}, 5).has_value());
  ASSERT_TRUE(small->swap_out(SeqId{2}).has_value());
  EXPECT_EQ(small->usage().swap_used_blocks, 2);
  EXPECT_EQ(small->free(SeqId{2}), 2);
  EXPECT_EQ(small->usage().swap_used_blocks, 0);
  EXPECT_INVARIANTS(*small);
}

TEST(KvCacheManager, LogsSizesAtConstruction) {
  auto sinks = base::LogSinks::Memory(base::LogLevel::kInfo, base::LogFormat::kText);
  KvCacheManagerOptions o;
  o.layout = testing::SmallLayout(config::KvDtype::kFp16, 16);
  o.num_blocks = 101;
  KvCacheManager m(o, base::Logger(sinks, "cache"));
  const std::string log = sinks->memory_contents();
  EXPECT_NE(log.find("100 blocks of 16 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find(absl::StrCat(o.layout.bytes_per_block(), " bytes per block")),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("max 1600 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("fp16"), std::string::npos) << log;
  EXPECT_EQ(m.max_tokens(), 1600);
}

TEST(CacheInvariants, DetectCorruptedState) {
  auto m = MakeManager(8, 4);
  const std::vector<int32_t> toks = Tokens(9);
  m->match_prefix(SeqId{1}, toks, kKey);
  ASSERT_TRUE(m->allocate(SeqId{1}, 9).has_value());
  m->commit_full_blocks(SeqId{1}, toks);
  ASSERT_TRUE(CheckCacheInvariants(*m).ok());

  // A reference nobody holds.
  BlockPool& pool = KvCacheManagerTestPeer::pool(*m);
  const BlockId b0 = m->block_table(SeqId{1})[0];
  pool.retain(b0);
  EXPECT_FALSE(CheckCacheInvariants(*m).ok());
  pool.release(b0);
  ASSERT_TRUE(CheckCacheInvariants(*m).ok());

  // A table entry pointing at a free block.
  SequenceKvState& s = KvCacheManagerTestPeer::state(*m, SeqId{1});
  const BlockId tail = s.table.back();
  const BlockId free_block = *pool.free_queue().front();
  s.table.replace_block(s.table.num_blocks() - 1, free_block);
  EXPECT_FALSE(CheckCacheInvariants(*m).ok());
  s.table.replace_block(s.table.num_blocks() - 1, tail);

  // A committed block whose content hash is gone.
  pool.unpublish(s.table[0]);
  const absl::Status st = CheckCacheInvariants(*m);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("chain hash"), std::string::npos) << st;
  pool.publish(s.table[0], s.hashes[0]);

  // Tokens that do not match the number of blocks.
  s.table.append_block(*pool.allocate());
  EXPECT_FALSE(CheckCacheInvariants(*m).ok());
}

}  // namespace
}  // namespace kvserve::cache
