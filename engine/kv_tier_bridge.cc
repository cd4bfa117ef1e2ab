#include "engine/kv_tier_bridge.h"

#include <utility>

#include "base/check.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_block_record.h"

namespace kvserve::engine {

KvTierBridge::KvTierBridge(cache::KvStorage& device, cache::KvStorage& host,
                           std::unique_ptr<cache::RemoteKvTier> remote, base::Logger logger)
    : device_(device), host_(host), remote_(std::move(remote)), logger_(std::move(logger)) {
  KVS_CHECK(host_.host_addressable(), "the remote tier needs a host-addressable host pool");
  bytes_.resize(host_.layout().bytes_per_block());
}

void KvTierBridge::SendLookups(scheduler::Scheduler& scheduler) {
  lookups_.clear();
  scheduler.take_remote_lookups(lookups_);
  for (auto& l : lookups_) {
    cache::RemoteLookupRequest req;
    req.ticket = next_ticket_++;
    req.tenant_salt = l.tenant_salt;
    req.block_hashes.reserve(l.hashes.size());
    for (cache::BlockHash h : l.hashes) req.block_hashes.push_back(h.value());
    pending_[req.ticket] = Pending{l.seq, l.tenant_salt, std::move(l.hashes)};
    remote_->Lookup(std::move(req));
  }
}

void KvTierBridge::ApplyReplies(cache::KvCacheManager& cache, scheduler::Scheduler& scheduler) {
  replies_.clear();
  remote_->TakeReplies(replies_);
  if (replies_.empty()) return;
  (void)device_.synchronize();  // no device copy may still be writing the host pool
  for (auto& r : replies_) {
    auto it = pending_.find(r.ticket);
    if (it == pending_.end()) continue;
    Pending p = std::move(it->second);
    pending_.erase(it);
    counters_.load_seconds.push_back(static_cast<double>(r.latency_ns) * 1e-9);
    for (size_t i = 0; i < r.records.size() && i < p.hashes.size(); ++i) {
      if (cache.host_cache().find(p.hashes[i])) continue;  // fetched meanwhile by another lookup
      const std::optional<cache::BlockId> host = cache.insert_remote_block(p.hashes[i], p.tenant_salt);
      if (!host) {
        counters_.insert_failed_blocks += r.records.size() - i;
        break;
      }
      const std::string& rec = r.records[i];
      // The tier checked the record: the payload follows the header and has the layout's size.
      WriteBlockBytes(host_, *host,
                      std::as_bytes(std::span<const char>(rec.data() + cache::kKvBlockHeaderBytes,
                                                          rec.size() - cache::kKvBlockHeaderBytes)));
      ++counters_.inserted_blocks;
    }
    // Aborted meanwhile: the blocks stay in the host tier for others; the call is a no-op.
    scheduler.remote_lookup_done(p.seq);
  }
  // Inserting may have evicted host blocks for write-back: publish them before the next step
  // can reuse their blocks.
  PublishWrites(cache);
}

void KvTierBridge::PublishWrites(cache::KvCacheManager& cache) {
  writes_.clear();
  cache.take_remote_writes(writes_);
  if (writes_.empty()) return;
  const cache::KvTierIdentity& id = remote_->identity();
  (void)device_.synchronize();
  for (const cache::RemoteWrite& w : writes_) {
    cache::KvStorage& src = w.on_host ? host_ : device_;
    if (!src.host_addressable()) {
      ++counters_.skipped_writes;
      if (!warned_device_) {
        warned_device_ = true;
        logger_.warn("remote KV tier: write-through needs a host-addressable KV pool; set "
                     "cache.remote_kv_write_back=true on this backend");
      }
      continue;
    }
    ReadBlockBytes(src, w.block, bytes_);
    const cache::KvBlockAddress at{w.tenant_salt, w.hash.value()};
    remote_->Write(at, cache::EncodeKvBlockRecord(id, at, bytes_));
  }
}

void KvTierBridge::DiscardWrites(cache::KvCacheManager& cache) {
  writes_.clear();
  cache.take_remote_writes(writes_);
  writes_.clear();
}

std::vector<double> KvTierBridge::TakeLatencies() {
  std::vector<double> out;
  out.swap(counters_.load_seconds);
  return out;
}

}  // namespace kvserve::engine
