#include "server/openai/responses_store.h"

#include <utility>

#include "base/check.h"

namespace kvserve::server {

ResponseStore::ResponseStore(ResponseStoreOptions options, const base::Clock* clock)
    : options_(options), clock_(clock) {
  KVS_CHECK(clock_ != nullptr, "the response store needs a clock");
}

void ResponseStore::Put(const std::string& id, StoredResponse response) {
  if (!enabled()) return;
  const base::Nanos now = clock_->now_ns();
  absl::MutexLock lock(&mu_);
  const uint64_t generation = next_generation_++;
  Entry& e = entries_[id];
  e.response = std::move(response);
  e.expires_ns = now + options_.ttl_ns;
  e.generation = generation;
  order_.emplace_back(id, generation);
  EvictLocked(now);
}

void ResponseStore::EvictLocked(base::Nanos now) {
  // Entries expire in insertion order (one TTL for all), so expired ones are at the front.
  while (!order_.empty()) {
    auto& [id, generation] = order_.front();
    auto it = entries_.find(id);
    const bool live = it != entries_.end() && it->second.generation == generation;
    if (live && it->second.expires_ns > now &&
        static_cast<int64_t>(entries_.size()) <= options_.max_entries) {
      break;
    }
    if (live) entries_.erase(it);
    order_.pop_front();
  }
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) {
  const base::Nanos now = clock_->now_ns();
  absl::MutexLock lock(&mu_);
  EvictLocked(now);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.response;
}

bool ResponseStore::Erase(const std::string& id) {
  const base::Nanos now = clock_->now_ns();
  absl::MutexLock lock(&mu_);
  EvictLocked(now);
  return entries_.erase(id) > 0;
}

int64_t ResponseStore::size() {
  const base::Nanos now = clock_->now_ns();
  absl::MutexLock lock(&mu_);
  EvictLocked(now);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace kvserve::server
