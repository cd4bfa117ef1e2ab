// The remote KV tier's worker: one I/O thread that owns the RedisKvStore, so that no engine
// step ever waits on the network. The engine thread only appends to two queues and collects
// replies (a mutex held for a vector push or swap, never across I/O).
//
//   engine thread                         tier thread (owns RedisKvStore)
//   Lookup(ticket, salt, hashes) ──┐      ┌─► GetMany (one pipelined round trip per lookup)
//   Write(address, record) ────────┼─►────┤   CheckKvBlockRecord on every value; the reply
//   TakeReplies() ◄── replies_ ◄───┘      │   keeps the leading run of valid blocks
//   on_reply() wakes the engine loop      └─► PutMany (batches of queued writes)
//
// Failure model (Redis down, slow or full never fails a request): a failed round trip answers
// its lookup with an error (the request computes locally), queued writes are dropped and
// counted, available() turns false (the engine stops parking requests for the tier) and the
// first failure of an outage is logged once. While down the thread probes the server after
// RedisKvStore's backoff; the first success logs the recovery and available() turns true.
// Writes are bounded by max_pending_write_bytes (beyond it they are dropped and counted).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "cache/kv_block_record.h"
#include "cache/redis_kv_store.h"

namespace kvserve::cache {

struct RemoteKvTierOptions {
  RedisKvStoreOptions store;
  KvTierIdentity identity;
  size_t max_pending_write_bytes = 64u << 20;
  int max_write_batch = 64;  // SETs per pipelined round trip
};

struct RemoteLookupRequest {
  uint64_t ticket = 0;
  uint64_t tenant_salt = 0;
  std::vector<uint64_t> block_hashes;  // consecutive blocks of one prompt
};

struct RemoteLookupReply {
  uint64_t ticket = 0;
  bool error = false;                  // the round trip failed: nothing was looked up
  std::vector<std::string> records;    // leading valid blocks, each a whole checked record
  base::Nanos latency_ns = 0;          // queued -> answered
};

// Cumulative counters (read from any thread).
struct RemoteKvTierStats {
  uint64_t lookups = 0;          // lookup round trips
  uint64_t lookup_blocks = 0;    // blocks asked for
  uint64_t hit_blocks = 0;       // valid blocks returned
  uint64_t rejected_blocks = 0;  // present but mismatching, truncated or corrupt (never used)
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t blocks_written = 0;
  uint64_t dropped_writes = 0;   // queue full or tier down
  uint64_t errors = 0;           // failed round trips
  bool available = true;
};

class RemoteKvTier {
 public:
  // `on_reply` is called on the tier thread after a reply was queued and when available()
  // changes; it must not block (the engine notifies its condition variable). `clock` must
  // outlive the tier.
  RemoteKvTier(RemoteKvTierOptions options, const base::Clock* clock, base::Logger logger,
               std::function<void()> on_reply);
  ~RemoteKvTier();
  RemoteKvTier(const RemoteKvTier&) = delete;
  RemoteKvTier& operator=(const RemoteKvTier&) = delete;

  void Lookup(RemoteLookupRequest request);
  // Queues one encoded record (EncodeKvBlockRecord) for `at`; dropped when the queue is full.
  void Write(KvBlockAddress at, std::string record);
  void TakeReplies(std::vector<RemoteLookupReply>& out);
  bool available() const { return available_.load(std::memory_order_relaxed); }
  RemoteKvTierStats stats() const;
  const KvTierIdentity& identity() const { return options_.identity; }

 private:
  struct PendingLookup {
    RemoteLookupRequest request;
    base::Nanos queued = 0;
  };
  struct PendingWrite {
    std::string key;
    std::string record;
  };
  void Run();
  void DoLookup(PendingLookup& l);
  void DoWrites(std::vector<PendingWrite>& batch);
  void OnResult(const absl::Status& st);

  const RemoteKvTierOptions options_;
  const base::Clock* clock_;
  base::Logger logger_;
  std::function<void()> on_reply_;
  RedisKvStore store_;  // tier thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<PendingLookup> lookups_;
  std::deque<PendingWrite> writes_;
  size_t pending_write_bytes_ = 0;
  std::vector<RemoteLookupReply> replies_;
  RemoteKvTierStats stats_;  // guarded by mu_ (except `available`, mirrored below)
  std::atomic<bool> available_{true};
  bool logged_down_ = false;  // tier thread only

  std::thread thread_;
};

}  // namespace kvserve::cache
