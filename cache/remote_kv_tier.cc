#include "cache/remote_kv_tier.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace kvserve::cache {

RemoteKvTier::RemoteKvTier(RemoteKvTierOptions options, const base::Clock* clock, base::Logger logger,
                           std::function<void()> on_reply)
    : options_(std::move(options)),
      clock_(clock),
      logger_(std::move(logger)),
      on_reply_(std::move(on_reply)),
      store_(options_.store, clock) {
  thread_ = std::thread([this] { Run(); });
}

RemoteKvTier::~RemoteKvTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RemoteKvTier::Lookup(RemoteLookupRequest request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lookups_.push_back({std::move(request), clock_->now_ns()});
  }
  cv_.notify_one();
}

void RemoteKvTier::Write(KvBlockAddress at, std::string record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!available_.load(std::memory_order_relaxed) ||
        pending_write_bytes_ + record.size() > options_.max_pending_write_bytes) {
      ++stats_.dropped_writes;
      return;
    }
    pending_write_bytes_ += record.size();
    writes_.push_back({KvBlockKey(options_.identity, at), std::move(record)});
  }
  cv_.notify_one();
}

void RemoteKvTier::TakeReplies(std::vector<RemoteLookupReply>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : replies_) out.push_back(std::move(r));
  replies_.clear();
}

RemoteKvTierStats RemoteKvTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteKvTierStats s = stats_;
  s.available = available_.load(std::memory_order_relaxed);
  return s;
}

void RemoteKvTier::OnResult(const absl::Status& st) {
  {
    // Transport and server errors as the store counts them (calls skipped while backing off
    // are not errors).
    std::lock_guard<std::mutex> lock(mu_);
    stats_.errors = store_.stats().errors;
  }
  if (st.ok() || st.code() == absl::StatusCode::kResourceExhausted) {
    // Full (OOM on SET) is the server answering: the link is up.
    if (!available_.load(std::memory_order_relaxed)) {
      logger_.info("remote KV tier: reconnected to redis %s:%d", options_.store.endpoint.host,
                   options_.store.endpoint.port);
      available_.store(true, std::memory_order_relaxed);
      if (on_reply_) on_reply_();  // the engine republishes the tier's state
    }
    logged_down_ = false;
    return;
  }
  if (available_.exchange(false, std::memory_order_relaxed) && on_reply_) on_reply_();
  if (!logged_down_) {
    logged_down_ = true;
    logger_.warn("remote KV tier unavailable (%s): serving from local tiers only, retrying with backoff",
                 std::string(st.message()));
  }
}

void RemoteKvTier::DoLookup(PendingLookup& l) {
  const RemoteLookupRequest& req = l.request;
  std::vector<std::string> keys;
  keys.reserve(req.block_hashes.size());
  for (uint64_t h : req.block_hashes) keys.push_back(KvBlockKey(options_.identity, {req.tenant_salt, h}));
  RemoteLookupReply reply;
  reply.ticket = req.ticket;
  auto values = store_.GetMany(keys);
  OnResult(values.status());
  uint64_t hits = 0, rejected = 0, bytes = 0;
  if (!values.ok()) {
    reply.error = true;
  } else {
    bool leading = true;
    for (size_t i = 0; i < values->size(); ++i) {
      std::optional<std::string>& v = (*values)[i];
      if (!v) {
        leading = false;
        continue;
      }
      bytes += v->size();
      const KvRecordCheck check =
          CheckKvBlockRecord(std::as_bytes(std::span<const char>(v->data(), v->size())), options_.identity,
                             {req.tenant_salt, req.block_hashes[i]});
      if (!check.ok()) {
        ++rejected;
        leading = false;
        continue;
      }
      if (!leading) continue;  // a chain is usable only up to its first gap
      reply.records.push_back(std::move(*v));
      ++hits;
    }
  }
  reply.latency_ns = clock_->now_ns() - l.queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    stats_.lookup_blocks += req.block_hashes.size();
    stats_.hit_blocks += hits;
    stats_.rejected_blocks += rejected;
    stats_.bytes_read += bytes;
    replies_.push_back(std::move(reply));
  }
  if (on_reply_) on_reply_();
}

void RemoteKvTier::DoWrites(std::vector<PendingWrite>& batch) {
  std::vector<std::pair<std::string, std::string>> entries;
  entries.reserve(batch.size());
  uint64_t bytes = 0;
  for (auto& w : batch) {
    bytes += w.record.size();
    entries.emplace_back(std::move(w.key), std::move(w.record));
  }
  const absl::Status st = store_.PutMany(entries);
  OnResult(st);
  std::lock_guard<std::mutex> lock(mu_);
  if (st.ok()) {
    stats_.bytes_written += bytes;
    stats_.blocks_written += entries.size();
  } else {
    stats_.dropped_writes += entries.size();
  }
}

void RemoteKvTier::Run() {
  std::vector<PendingWrite> batch;
  // The first connection is made eagerly so that a wrong address shows at start-up.
  OnResult(store_.GetMany(std::vector<std::string>{"kvserve:probe"}).status());
  while (true) {
    PendingLookup lookup;
    bool have_lookup = false;
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (available_.load(std::memory_order_relaxed)) {
        cv_.wait(lock, [&] { return stop_ || !lookups_.empty() || !writes_.empty(); });
      } else {
        // Down: wake up to probe (RedisKvStore answers without I/O until its backoff passed).
        cv_.wait_for(lock, std::chrono::milliseconds(100),
                     [&] { return stop_ || !lookups_.empty() || !writes_.empty(); });
      }
      if (stop_) return;
      if (!lookups_.empty()) {
        lookup = std::move(lookups_.front());
        lookups_.pop_front();
        have_lookup = true;
      } else {
        // Lookups first: a request is waiting on them, writes only fill the tier.
        while (!writes_.empty() && static_cast<int>(batch.size()) < options_.max_write_batch) {
          pending_write_bytes_ -= writes_.front().record.size();
          batch.push_back(std::move(writes_.front()));
          writes_.pop_front();
        }
      }
    }
    if (have_lookup) {
      DoLookup(lookup);
    } else if (!batch.empty()) {
      DoWrites(batch);
    } else if (!available_.load(std::memory_order_relaxed)) {
      OnResult(store_.GetMany(std::vector<std::string>{"kvserve:probe"}).status());
    }
  }
}

}  // namespace kvserve::cache
