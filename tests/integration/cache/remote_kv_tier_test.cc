// RemoteKvTier (the remote tier's I/O thread) against a real redis-server on 127.0.0.1 and a
// free port: writes land, lookups return the leading run of valid blocks, corrupt and
// foreign records are rejected and counted (never returned), another tenant salt misses, and
// a dead server answers lookups with errors (available() false) until it returns.
#include "cache/remote_kv_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/integration/cache/redis_process.h"

namespace kvserve::cache {
namespace {

using testing::FreePort;
using testing::RedisProcess;

KvTierIdentity Identity(uint64_t model) {
  KvTierIdentity id;
  id.model_fingerprint = model;
  id.config_hash = 42;
  id.layout.num_layers = 2;
  id.layout.num_kv_heads = 2;
  id.layout.head_dim = 8;
  id.layout.block_size = 4;
  return id;
}

std::string Record(const KvTierIdentity& id, KvBlockAddress at, uint8_t fill) {
  std::vector<std::byte> payload(id.layout.bytes_per_block(), std::byte{fill});
  return EncodeKvBlockRecord(id, at, payload);
}

class Tier {
 public:
  Tier(int port, KvTierIdentity id) {
    RemoteKvTierOptions o;
    o.store.endpoint = {"127.0.0.1", port, 0};
    o.store.timeout_seconds = 0.2;
    o.store.min_backoff_seconds = 0.05;
    o.store.max_backoff_seconds = 0.2;
    o.identity = id;
    tier = std::make_unique<RemoteKvTier>(o, &clock, base::Logger(), [this] { ++replies; });
  }
  // Blocks until the reply of one lookup arrives (5 s at most).
  RemoteLookupReply Lookup(uint64_t salt, std::vector<uint64_t> hashes) {
    const int before = replies.load();
    tier->Lookup({++ticket, salt, std::move(hashes)});
    for (int i = 0; i < 500 && replies.load() == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::vector<RemoteLookupReply> out;
    tier->TakeReplies(out);
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? RemoteLookupReply{} : std::move(out[0]);
  }
  base::SteadyClock clock;
  std::atomic<int> replies{0};
  uint64_t ticket = 0;
  std::unique_ptr<RemoteKvTier> tier;
};

bool WaitFor(const std::function<bool()>& f) {
  for (int i = 0; i < 500; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

TEST(RemoteKvTier, ReturnsValidLeadingBlocksRejectsBadOnesAndSurvivesOutages) {
  const int port = FreePort();
  RedisProcess redis(port);
  ASSERT_TRUE(redis.ready()) << "redis-server did not start (tools/setup.sh installs it)";
  const KvTierIdentity id = Identity(7);
  Tier t(port, id);
  constexpr uint64_t kSalt = 11;
  for (uint64_t h = 1; h <= 3; ++h) t.tier->Write({kSalt, h}, Record(id, {kSalt, h}, static_cast<uint8_t>(h)));
  ASSERT_TRUE(WaitFor([&] { return t.tier->stats().blocks_written == 3; }));

  // Blocks 1..3 are there, 4 is not: the reply holds three whole, checked records.
  RemoteLookupReply r = t.Lookup(kSalt, {1, 2, 3, 4});
  EXPECT_FALSE(r.error);
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[1], Record(id, {kSalt, 2}, 2));
  EXPECT_EQ(t.tier->stats().hit_blocks, 3u);

  // Another tenant salt addresses other keys: nothing.
  EXPECT_TRUE(t.Lookup(kSalt + 1, {1, 2, 3}).records.empty());

  // Corrupt block 2 (one flipped payload byte): the chain stops before it; counted.
  {
    std::string bad = Record(id, {kSalt, 2}, 2);
    bad[kKvBlockHeaderBytes + 5] ^= 0x40;
    Tier writer(port, id);
    writer.tier->Write({kSalt, 2}, bad);
    ASSERT_TRUE(WaitFor([&] { return writer.tier->stats().blocks_written == 1; }));
  }
  r = t.Lookup(kSalt, {1, 2, 3});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(t.tier->stats().rejected_blocks, 1u);

  // A replica of another model reads the same keys' namespace but never accepts them: its
  // keys differ, and a record planted under its key with our header is rejected.
  Tier other(port, Identity(8));
  EXPECT_TRUE(other.Lookup(kSalt, {1}).records.empty());
  {
    Tier writer(port, Identity(8));
    writer.tier->Write({kSalt, 1}, Record(id, {kSalt, 1}, 1));  // header says model 7
    ASSERT_TRUE(WaitFor([&] { return writer.tier->stats().blocks_written == 1; }));
  }
  EXPECT_TRUE(other.Lookup(kSalt, {1}).records.empty());
  EXPECT_EQ(other.tier->stats().rejected_blocks, 1u);

  // Redis dies: lookups are answered with an error, writes are dropped, the tier is down.
  redis.Kill();
  r = t.Lookup(kSalt, {1});
  EXPECT_TRUE(r.error);
  EXPECT_FALSE(t.tier->available());
  t.tier->Write({kSalt, 9}, Record(id, {kSalt, 9}, 9));
  EXPECT_GE(t.tier->stats().dropped_writes, 1u);
  EXPECT_GE(t.tier->stats().errors, 1u);

  // It returns: the tier reconnects by itself and works again.
  redis.Start();
  ASSERT_TRUE(redis.ready());
  EXPECT_TRUE(WaitFor([&] { return t.tier->available(); }));
  t.tier->Write({kSalt, 9}, Record(id, {kSalt, 9}, 9));
  ASSERT_TRUE(WaitFor([&] { return t.tier->stats().blocks_written == 4; }));
  EXPECT_EQ(t.Lookup(kSalt, {9}).records.size(), 1u);
}

}  // namespace
}  // namespace kvserve::cache
