// The remote KV tier's connection to Redis (issue 20): one MGET / pipelined SETs of encoded block
// records (kv_block_record.h) over one hiredis connection with timeouts from config.
//
// Failure model: Redis down, slow or full never fails a request. Any transport error marks
// the store down; calls made while down return Unavailable at once (no I/O) until the
// backoff has passed, then one reconnect is tried; the backoff doubles on each failed
// reconnect (min_backoff .. max_backoff) and resets on success.
//
//   state:   kUp --error--> kDown(retry_at) --now >= retry_at, connect ok--> kUp
//                                  ^-------- connect fails: backoff *= 2 ---'
//
// Not thread-safe: one owner thread (the tier's I/O thread) calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"

namespace kvserve::cache {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  int db = 0;
};

// Parses redis://HOST[:PORT][/DB]. Errors name the part that is wrong.
absl::StatusOr<RedisEndpoint> ParseRedisUrl(std::string_view url);

struct RedisKvStoreOptions {
  RedisEndpoint endpoint;
  double timeout_seconds = 0.05;     // connect and per-command timeout
  int64_t ttl_seconds = 3600;        // expiry of every written record; 0: none
  double min_backoff_seconds = 0.1;
  double max_backoff_seconds = 10.0;
};

struct RedisKvStoreStats {
  uint64_t errors = 0;        // transport or server errors
  uint64_t reconnects = 0;    // successful connects after the first
  uint64_t skipped_down = 0;  // calls answered Unavailable without I/O (backing off)
};

class RedisKvStore {
 public:
  RedisKvStore(RedisKvStoreOptions options, const base::Clock* clock);
  ~RedisKvStore();
  RedisKvStore(const RedisKvStore&) = delete;
  RedisKvStore& operator=(const RedisKvStore&) = delete;

  // One round trip (MGET): the value of each key, nullopt where absent.
  absl::StatusOr<std::vector<std::optional<std::string>>> GetMany(std::span<const std::string> keys);
  // One pipelined round trip of SET key value [EX ttl].
  absl::Status PutMany(std::span<const std::pair<std::string, std::string>> entries);

  bool up() const { return conn_ != nullptr; }
  const RedisKvStoreStats& stats() const { return stats_; }

 private:
  struct Conn;
  absl::Status EnsureConnected();
  absl::Status Fail(std::string what);

  RedisKvStoreOptions options_;
  const base::Clock* clock_;
  std::unique_ptr<Conn> conn_;
  bool ever_connected_ = false;
  base::Nanos retry_at_ = 0;
  double backoff_ = 0;
  RedisKvStoreStats stats_;
};

}  // namespace kvserve::cache
