// KvTierBridge: the engine thread's side of the remote KV tier. It moves blocks between the
// cache manager's bookkeeping, the KV bytes and the tier's I/O thread; it never does I/O.
//
//   Schedule ──► RemoteLookups ──► SendLookups ──► RemoteKvTier::Lookup (async)
//   loop top ◄── ApplyReplies: each valid record -> a host prefix-tier block (bytes copied in),
//                then the sequence rejoins the waiting queue; match_prefix loads it as a host hit
//   after a step: PublishWrites: RemoteWrite (write-through: committed device blocks;
//                write-back: blocks the host tier evicted) -> encode -> RemoteKvTier::Write
//
// Reading and writing block bytes needs host-addressable storage. On the CPU backend the
// pool is host memory; a device pool (CUDA) publishes through write-back only (host blocks),
// and write-through blocks are skipped and counted. The bridge synchronizes the device
// storage's queue before touching host bytes (a no-op on the CPU).
// Engine thread only (the tier it talks to is thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/logger.h"
#include "cache/kv_cache_manager.h"
#include "cache/kv_storage.h"
#include "cache/remote_kv_tier.h"
#include "scheduler/scheduler.h"

namespace kvserve::engine {

// Engine-side counters of the remote tier (cumulative).
struct KvTierBridgeCounters {
  uint64_t inserted_blocks = 0;       // fetched blocks placed in the host tier
  uint64_t insert_failed_blocks = 0;  // fetched but no host block free
  uint64_t skipped_writes = 0;        // write-through block not host-addressable
  std::vector<double> load_seconds;   // lookup latencies since the last TakeLatencies
};

class KvTierBridge {
 public:
  // `device` is the KV pool, `host` the host pool (must exist: remote blocks land there).
  KvTierBridge(cache::KvStorage& device, cache::KvStorage& host, std::unique_ptr<cache::RemoteKvTier> remote,
               base::Logger logger);

  bool remote_available() const { return remote_->available(); }
  void SendLookups(scheduler::Scheduler& scheduler);
  void ApplyReplies(cache::KvCacheManager& cache, scheduler::Scheduler& scheduler);
  void PublishWrites(cache::KvCacheManager& cache);
  // The step failed: the pending writes' bytes cannot be trusted.
  void DiscardWrites(cache::KvCacheManager& cache);

  cache::RemoteKvTierStats remote_stats() const { return remote_->stats(); }
  const KvTierBridgeCounters& counters() const { return counters_; }
  std::vector<double> TakeLatencies();
  cache::RemoteKvTier& remote() { return *remote_; }

 private:
  struct Pending {
    cache::SeqId seq;
    uint64_t tenant_salt = 0;
    std::vector<cache::BlockHash> hashes;
  };

  cache::KvStorage& device_;
  cache::KvStorage& host_;
  std::unique_ptr<cache::RemoteKvTier> remote_;
  base::Logger logger_;
  uint64_t next_ticket_ = 1;
  absl::flat_hash_map<uint64_t, Pending> pending_;
  std::vector<scheduler::RemoteLookup> lookups_;       // scratch
  std::vector<cache::RemoteLookupReply> replies_;      // scratch
  std::vector<cache::RemoteWrite> writes_;             // scratch
  std::vector<std::byte> bytes_;                       // scratch: one block
  KvTierBridgeCounters counters_;
  bool warned_device_ = false;
};

}  // namespace kvserve::engine
