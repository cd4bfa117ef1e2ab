// RedisKvStore against the real Redis server (Debian package redis-server): started by the
// test on 127.0.0.1 and a free port, killed and restarted on the same port to show that the
// store degrades to Unavailable without I/O while backing off and reconnects afterwards.
// Only the redis-server processes started here are ever signalled.
#include "cache/redis_kv_store.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cache/kv_block_record.h"
#include "tests/integration/cache/redis_process.h"

namespace kvserve::cache {
namespace {

using testing::FreePort;

// The test restarts the server through its own instance; RedisProcess does the work.
class RedisServer {
 public:
  explicit RedisServer(int port) : proc_(port) {}
  bool ready() const { return proc_.ready(); }
  void Kill() { proc_.Kill(); }

 private:
  testing::RedisProcess proc_;
};

constexpr double kSecond = 1e9;

TEST(RedisKvStore, RoundTripsRecordsAndDegradesAndReconnects) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  auto redis = std::make_unique<RedisServer>(port);
  ASSERT_TRUE(redis->ready()) << "redis-server did not start (tools/setup.sh test installs it)";

  base::FakeClock clock;
  RedisKvStoreOptions o;
  o.endpoint = {.host = "127.0.0.1", .port = port, .db = 2};
  o.timeout_seconds = 0.2;
  o.ttl_seconds = 60;
  o.min_backoff_seconds = 1.0;
  o.max_backoff_seconds = 4.0;
  RedisKvStore store(o, &clock);

  KvTierIdentity id;
  id.model_fingerprint = 1;
  id.config_hash = 2;
  id.layout = {.num_layers = 2, .num_kv_heads = 1, .head_dim = 4, .block_size = 8};
  std::vector<std::byte> payload(id.layout.bytes_per_block(), std::byte{0x5a});
  const KvBlockAddress at{.tenant_salt_hash = 9, .block_hash = 77};
  const std::string key = KvBlockKey(id, at);
  const std::string record = EncodeKvBlockRecord(id, at, payload);
  // Binary-safe: the record holds NUL bytes.
  ASSERT_NE(record.find('\0'), std::string::npos);

  std::vector<std::pair<std::string, std::string>> puts = {{key, record}};
  ASSERT_TRUE(store.PutMany(puts).ok());
  std::vector<std::string> keys = {key, "kvserve:kv:absent"};
  auto got = store.GetMany(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_EQ(*(*got)[0], record);
  EXPECT_FALSE((*got)[1].has_value());
  const auto bytes = std::as_bytes(std::span<const char>((*got)[0]->data(), (*got)[0]->size()));
  EXPECT_TRUE(CheckKvBlockRecord(bytes, id, at).ok());

  // Redis dies: the next call fails Unavailable (no exception, no hang past the timeout),
  // and calls during the backoff do no I/O.
  redis->Kill();
  auto t0 = std::chrono::steady_clock::now();
  auto down = store.GetMany(keys);
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_FALSE(store.up());
  const uint64_t errors = store.stats().errors;
  EXPECT_GE(errors, 1u);
  EXPECT_EQ(store.PutMany(puts).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.stats().skipped_down, 1u);
  EXPECT_EQ(store.stats().errors, errors);

  // After the backoff one reconnect is tried; it fails (still down) and doubles the backoff.
  clock.advance_ns(static_cast<base::Nanos>(1.1 * kSecond));
  EXPECT_EQ(store.GetMany(keys).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.stats().errors, errors + 1);
  clock.advance_ns(static_cast<base::Nanos>(1.1 * kSecond));  // < 2 s: still backing off
  EXPECT_EQ(store.GetMany(keys).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.stats().skipped_down, 2u);

  // Redis returns (empty: a cache): the store reconnects once the backoff has passed.
  redis = std::make_unique<RedisServer>(port);
  ASSERT_TRUE(redis->ready());
  clock.advance_ns(static_cast<base::Nanos>(1.0 * kSecond));
  auto back = store.GetMany(keys);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE((*back)[0].has_value());
  EXPECT_TRUE(store.up());
  EXPECT_EQ(store.stats().reconnects, 1u);
  ASSERT_TRUE(store.PutMany(puts).ok());
  auto again = store.GetMany(keys);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], record);
}

TEST(RedisKvStore, ParsesUrlsAndNamesWhatIsWrong) {
  auto ep = ParseRedisUrl("redis://10.0.0.5:6380/3");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->host, "10.0.0.5");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->db, 3);
  ep = ParseRedisUrl("redis://kvserve-redis");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->port, 6379);
  EXPECT_EQ(ep->db, 0);
  EXPECT_NE(ParseRedisUrl("http://x:1").status().message().find("must start with redis://"), std::string::npos);
  EXPECT_NE(ParseRedisUrl("redis://x:99999").status().message().find("port"), std::string::npos);
  EXPECT_NE(ParseRedisUrl("redis://x:1/db").status().message().find("database"), std::string::npos);
  EXPECT_NE(ParseRedisUrl("redis://:1").status().message().find("host"), std::string::npos);
  EXPECT_NE(ParseRedisUrl("rediss://x:6380").status().message().find("rediss:// (TLS) is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace kvserve::cache
