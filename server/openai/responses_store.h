// The bounded in-memory store behind /v1/responses' `store` and `previous_response_id`:
// finished responses by id, each with the conversation that produced it, for GET, DELETE and
// continuing a conversation. Bounded twice: at most `max_entries` (the oldest is evicted to
// make room) and `ttl` after it was stored an entry is gone. Nothing survives a restart.
//
// Thread-safe (handlers run on many connection threads). The clock is injected (monotonic).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace kvserve::server {

struct StoredResponse {
  std::string response_json;  // the Response object as GET returns it
  // The conversation as chat messages (JSON array text), without `instructions` (OpenAI does
  // not carry instructions over) and ending with the response's own output.
  std::string messages_json;
  std::string tenant;  // the tenant that created it ("" without API keys): only it may see it
};

struct ResponseStoreOptions {
  int64_t max_entries = 1000;  // 0: store nothing (store=true is then a 400)
  base::Nanos ttl_ns = 3600LL * 1'000'000'000;
};

class ResponseStore {
 public:
  ResponseStore(ResponseStoreOptions options, const base::Clock* clock);

  bool enabled() const { return options_.max_entries > 0; }
  const ResponseStoreOptions& options() const { return options_; }

  // Stores (or replaces) `id`; evicts expired entries, then the oldest while over the bound.
  void Put(const std::string& id, StoredResponse response);
  // nullopt when absent or expired.
  std::optional<StoredResponse> Get(const std::string& id);
  // False when absent or expired.
  bool Erase(const std::string& id);
  int64_t size();

 private:
  struct Entry {
    StoredResponse response;
    base::Nanos expires_ns = 0;
    uint64_t generation = 0;  // matches the order_ entry that is current for this id
  };
  void EvictLocked(base::Nanos now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ResponseStoreOptions options_;
  const base::Clock* clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Insertion order (oldest first), for eviction; stale pairs (erased or replaced ids) are
  // skipped. Invariant: every live entry has exactly one pair here with its generation.
  std::deque<std::pair<std::string, uint64_t>> order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvserve::server
