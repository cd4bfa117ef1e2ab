// The host prefix tier of KvCacheManager: evicted full prefix blocks are offloaded to the
// host pool and loaded back on a hit with their bytes intact; swap has priority over the tier;
// host blocks used by this step's copies are never handed out again in the same step; tenants
// stay apart; the remote-tier hand-off (write-through, write-back, fetched blocks). Every test
// runs the invariant checker after each operation.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "cache/cache_invariants.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

using testing::SmallLayout;
using testing::Tokens;
using testing::VerifyPattern;
using testing::WritePattern;

#define ASSERT_INVARIANTS(m) ASSERT_TRUE(CheckCacheInvariants(m).ok()) << CheckCacheInvariants(m)

constexpr int kBs = 4;

struct Tiered {
  std::unique_ptr<KvCacheManager> m;
  std::unique_ptr<HostKvStorage> device, host;
  std::vector<BlockCopy> to_host, to_device;

  Tiered(int32_t device_blocks, int32_t host_blocks, int32_t cache_blocks,
         RemoteWrites remote = RemoteWrites::kNone) {
    KvCacheManagerOptions o;
    o.layout = SmallLayout(config::KvDtype::kFp32, kBs);
    o.num_blocks = device_blocks + 1;
    o.num_host_blocks = host_blocks;
    o.host_cache_blocks = cache_blocks;
    o.remote_writes = remote;
    m = std::make_unique<KvCacheManager>(o, base::Logger());
    device = *HostKvStorage::Create(o.layout, o.num_blocks);
    host = *HostKvStorage::Create(o.layout, host_blocks);
  }
  // What the runner does with a step's copies: all device -> host first, then host -> device.
  void RunCopies() {
    to_host.clear();
    to_device.clear();
    m->take_tier_copies(to_host, to_device);
    ASSERT_TRUE(device->copy_blocks_to(*host, to_host).ok());
    ASSERT_TRUE(device->copy_blocks_from(*host, to_device).ok());
  }
  // A sequence that computes `tokens` (prompt) after its prefix hit, and publishes them.
  PrefixMatch Prefill(SeqId s, const std::vector<int32_t>& tokens, const PrefixKey& key) {
    m->begin_step();
    const PrefixMatch hit = m->match_prefix(s, tokens, key);
    const int64_t rest = static_cast<int64_t>(tokens.size()) - hit.num_tokens;
    EXPECT_TRUE(m->allocate(s, static_cast<int>(rest)).has_value());
    RunCopies();
    WritePattern(*device, *m, s, tokens, hit.num_tokens, rest);
    m->commit_full_blocks(s, tokens);
    return hit;
  }
};

const PrefixKey kKeyA = MakePrefixKey("model", "tenant-a", "");
const PrefixKey kKeyB = MakePrefixKey("model", "tenant-b", "");

TEST(HostPrefixTier, EvictedBlocksComeBackFromTheHostWithTheirBytes) {
  Tiered t(/*device_blocks=*/4, /*host_blocks=*/8, /*cache_blocks=*/8);
  const std::vector<int32_t> a = Tokens(13, 100);  // 3 full blocks may hit
  t.Prefill(SeqId{1}, a, kKeyA);
  ASSERT_INVARIANTS(*t.m);
  t.m->free(SeqId{1});

  // Another prompt takes the whole pool: the three cached blocks are evicted to the host.
  const std::vector<int32_t> b = Tokens(16, 500);
  t.Prefill(SeqId{2}, b, kKeyA);
  EXPECT_EQ(t.to_host.size(), 3u);
  EXPECT_EQ(t.m->usage().offloaded_blocks, 3u);
  EXPECT_EQ(t.m->usage().host_cache_blocks, 3);
  EXPECT_EQ(t.m->usage().evicted_blocks, 3u);
  ASSERT_INVARIANTS(*t.m);
  EXPECT_EQ(VerifyPattern(*t.device, *t.m, SeqId{2}, b), "");
  t.m->free(SeqId{2});

  // The first prompt again: nothing is on the device, all three blocks load from the host.
  EXPECT_EQ(t.m->probe_prefix(a, kKeyA).cached_blocks, 3);
  const PrefixMatch hit = t.Prefill(SeqId{3}, a, kKeyA);
  EXPECT_EQ(hit.num_blocks, 3);
  EXPECT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(hit.host_blocks, 3);
  EXPECT_EQ(t.to_device.size(), 3u);
  ASSERT_INVARIANTS(*t.m);
  EXPECT_EQ(VerifyPattern(*t.device, *t.m, SeqId{3}, a), "");
  const CacheUsage u = t.m->usage();
  EXPECT_EQ(u.host_hit_blocks, 3u);
  EXPECT_EQ(u.prefix_hit_tokens, 12u);
  // Loaded blocks are device cache blocks again: a fourth request hits on the device.
  t.m->free(SeqId{3});
  t.m->begin_step();
  const PrefixMatch again = t.m->match_prefix(SeqId{4}, a, kKeyA);
  EXPECT_EQ(again.num_blocks, 3);
  EXPECT_EQ(again.host_blocks, 0);
  ASSERT_INVARIANTS(*t.m);
}

TEST(HostPrefixTier, TenantsDoNotShareHostBlocks) {
  Tiered t(4, 8, 8);
  const std::vector<int32_t> a = Tokens(13, 100);
  t.Prefill(SeqId{1}, a, kKeyA);
  t.m->free(SeqId{1});
  t.Prefill(SeqId{2}, Tokens(16, 500), kKeyA);  // evicts tenant a's blocks to the host
  t.m->free(SeqId{2});
  ASSERT_EQ(t.m->usage().host_cache_blocks, 3);
  EXPECT_EQ(t.m->probe_prefix(a, kKeyB).cached_blocks, 0);
  const PrefixMatch hit = t.Prefill(SeqId{3}, a, kKeyB);
  EXPECT_EQ(hit.num_blocks, 0);
  ASSERT_INVARIANTS(*t.m);
}

TEST(HostPrefixTier, SwapHasPriorityAndThePrefixTierYields) {
  // Host pool of 4 blocks; the prefix tier may use all of them while swap does not.
  Tiered t(4, /*host_blocks=*/4, /*cache_blocks=*/4);
  t.Prefill(SeqId{1}, Tokens(16, 100), kKeyA);  // 4 full blocks
  t.m->free(SeqId{1});
  t.Prefill(SeqId{2}, Tokens(16, 500), kKeyA);  // evicts all four to the host
  ASSERT_EQ(t.m->usage().host_cache_blocks, 4);
  ASSERT_EQ(t.m->swap_space().num_free(), 0);
  // Next step: sequence 2 is preempted by swap; the prefix tier gives up its blocks.
  t.m->begin_step();
  ASSERT_TRUE(t.m->can_swap_out(SeqId{2}));
  auto copies = t.m->swap_out(SeqId{2});
  ASSERT_TRUE(copies.has_value());
  EXPECT_EQ(copies->size(), 4u);
  EXPECT_EQ(t.m->usage().host_cache_blocks, 0);
  EXPECT_EQ(t.m->usage().host_yielded_blocks, 4u);
  ASSERT_INVARIANTS(*t.m);
}

TEST(HostPrefixTier, HostBlocksUsedThisStepAreNotReusedUntilTheNext) {
  Tiered t(4, 8, 8);
  // A sequence with uncommitted KV is swapped out and back in: the host blocks its swap-in
  // reads wait in quarantine until the next step starts.
  t.m->begin_step();
  ASSERT_TRUE(t.m->allocate(SeqId{1}, 7).has_value());
  ASSERT_TRUE(t.m->swap_out(SeqId{1}).has_value());
  t.m->begin_step();
  const int32_t free_before = t.m->swap_space().num_free();
  auto copies = t.m->swap_in(SeqId{1});
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 2u);
  EXPECT_EQ(t.m->host_quarantine().size(), 2u);
  EXPECT_EQ(t.m->swap_space().num_free(), free_before);
  ASSERT_INVARIANTS(*t.m);
  t.m->begin_step();
  EXPECT_TRUE(t.m->host_quarantine().empty());
  EXPECT_EQ(t.m->swap_space().num_free(), free_before + 2);
  ASSERT_INVARIANTS(*t.m);
}

TEST(HostPrefixTier, ABlockLoadedThisStepIsNotEvictedForAnOffload) {
  // Prefix tier of one block: evicting the block a load reads in this step, for a new
  // offload, would overwrite those bytes first (writes run before reads). The offload is
  // dropped instead.
  Tiered t(/*device_blocks=*/2, /*host_blocks=*/1, /*cache_blocks=*/1);
  const std::vector<int32_t> a = Tokens(5, 100);  // 1 full block may hit
  t.Prefill(SeqId{1}, a, kKeyA);
  t.m->free(SeqId{1});
  t.Prefill(SeqId{2}, Tokens(5, 500), kKeyA);  // evicts a's block to the host
  ASSERT_EQ(t.m->usage().host_cache_blocks, 1);
  t.m->free(SeqId{2});
  // a again: its block loads from the host, taking b's cached block, whose offload must wait.
  const PrefixMatch hit = t.Prefill(SeqId{3}, a, kKeyA);
  EXPECT_EQ(hit.host_blocks, 1);
  EXPECT_GE(t.m->usage().offload_skipped_blocks, 1u);
  ASSERT_INVARIANTS(*t.m);
  EXPECT_EQ(VerifyPattern(*t.device, *t.m, SeqId{3}, a), "");
}

TEST(HostPrefixTier, WriteThroughHandsOverCommittedBlocksOfFullSequencesOnly) {
  Tiered t(8, 8, 8, RemoteWrites::kWriteThrough);
  t.Prefill(SeqId{1}, Tokens(13, 100), kKeyA);
  std::vector<RemoteWrite> w;
  t.m->take_remote_writes(w);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_FALSE(w[0].on_host);
  EXPECT_EQ(w[0].tenant_salt, TenantSalt(kKeyA));
  EXPECT_EQ(t.m->block_pool().hash(w[0].block), w[0].hash);
  // A compressing sequence (publish limit set) publishes locally but never remotely.
  t.m->set_publish_limit(SeqId{2}, 8);
  t.Prefill(SeqId{2}, Tokens(13, 900), kKeyA);
  w.clear();
  t.m->take_remote_writes(w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(t.m->num_committed_blocks(SeqId{2}), 2);
  ASSERT_INVARIANTS(*t.m);
}

TEST(HostPrefixTier, WriteBackHandsOverHostEvictionsAndQuarantinesThem) {
  // Host pool of 4 (2 for swap), prefix tier of 2.
  Tiered t(/*device_blocks=*/4, /*host_blocks=*/4, /*cache_blocks=*/2, RemoteWrites::kWriteBack);
  t.Prefill(SeqId{1}, Tokens(13, 100), kKeyA);  // 3 full blocks
  std::vector<RemoteWrite> w;
  t.m->take_remote_writes(w);
  EXPECT_TRUE(w.empty());  // nothing on commit
  t.m->free(SeqId{1});
  // Three evictions into a tier of two: the third offload pushes out the first, which is
  // handed to the remote tier; its block stays quarantined until the next step (its bytes
  // are read after this step's copies ran).
  t.Prefill(SeqId{2}, Tokens(16, 500), kKeyA);
  ASSERT_INVARIANTS(*t.m);
  t.m->take_remote_writes(w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(w[0].on_host);
  EXPECT_EQ(w[0].tenant_salt, TenantSalt(kKeyA));
  EXPECT_FALSE(t.m->host_cache().holds(w[0].block));
  ASSERT_EQ(t.m->host_quarantine().size(), 1u);
  EXPECT_EQ(t.m->host_quarantine()[0], w[0].block);
  EXPECT_EQ(t.m->usage().host_cache_blocks, 2);
  EXPECT_EQ(t.m->usage().host_evicted_blocks, 1u);
  t.m->begin_step();
  EXPECT_TRUE(t.m->host_quarantine().empty());
  ASSERT_INVARIANTS(*t.m);
  // With no free host block left, an eviction would not buy one: the offload is dropped and
  // the tier keeps what it has.
  t.m->free(SeqId{2});
  Tiered full(/*device_blocks=*/4, /*host_blocks=*/2, /*cache_blocks=*/2, RemoteWrites::kWriteBack);
  full.Prefill(SeqId{1}, Tokens(13, 100), kKeyA);
  full.m->free(SeqId{1});
  full.Prefill(SeqId{2}, Tokens(16, 500), kKeyA);
  EXPECT_EQ(full.m->usage().host_cache_blocks, 2);
  EXPECT_EQ(full.m->usage().offload_skipped_blocks, 1u);
  full.m->take_remote_writes(w);
  ASSERT_INVARIANTS(*full.m);
}

TEST(HostPrefixTier, FetchedRemoteBlocksAreHostHitsCountedAsRemote) {
  Tiered t(8, 8, 8);
  const std::vector<int32_t> a = Tokens(13, 100);
  std::vector<BlockHash> hashes;
  t.m->prefix_hashes(a, kKeyA, 0, 3, hashes);
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(t.m->probe_prefix(a, kKeyA).eligible_blocks, 3);
  EXPECT_EQ(t.m->probe_prefix(a, kKeyA).cached_blocks, 0);
  // Another replica's bytes for these blocks land in the host tier.
  Tiered other(8, 8, 8);
  other.Prefill(SeqId{1}, a, kKeyA);
  std::vector<std::byte> bytes(t.host->layout().bytes_per_block());
  for (int i = 0; i < 3; ++i) {
    const std::optional<BlockId> h = t.m->insert_remote_block(hashes[i], TenantSalt(kKeyA));
    ASSERT_TRUE(h.has_value());
    ReadBlockBytes(*other.device, other.m->block_table(SeqId{1})[i], bytes);
    WriteBlockBytes(*t.host, *h, bytes);
  }
  EXPECT_FALSE(t.m->insert_remote_block(hashes[0], TenantSalt(kKeyA)).has_value());  // already held
  EXPECT_EQ(t.m->probe_prefix(a, kKeyA).cached_blocks, 3);
  ASSERT_INVARIANTS(*t.m);
  const PrefixMatch hit = t.Prefill(SeqId{2}, a, kKeyA);
  EXPECT_EQ(hit.host_blocks, 3);
  EXPECT_EQ(hit.remote_blocks, 3);
  EXPECT_EQ(VerifyPattern(*t.device, *t.m, SeqId{2}, a), "");
  EXPECT_EQ(t.m->usage().remote_hit_blocks, 3u);
  ASSERT_INVARIANTS(*t.m);
}

}  // namespace
}  // namespace kvserve::cache
