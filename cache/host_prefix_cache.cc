#include "cache/host_prefix_cache.h"

#include <algorithm>

#include "base/check.h"

namespace kvserve::cache {

HostPrefixCache::HostPrefixCache(int32_t num_host_blocks, int32_t capacity)
    : capacity_(std::clamp(capacity, 0, num_host_blocks)), lru_(num_host_blocks), info_(num_host_blocks) {
  index_.reserve(static_cast<size_t>(capacity_));
}

void HostPrefixCache::insert(BlockId host, const HostBlockInfo& info) {
  KVS_CHECK(info.hash != kNoHash, "host prefix block ", host.value(), " without a hash");
  KVS_CHECK(!holds(host), "host block ", host.value(), " already held by the prefix tier");
  const bool inserted = index_.try_emplace(info.hash.value(), host.value()).second;
  KVS_CHECK(inserted, "host prefix tier already holds hash ", info.hash.value());
  info_[host.value()] = info;
  lru_.push_back(host);
}

void HostPrefixCache::erase(BlockId host) {
  KVS_CHECK(holds(host), "host block ", host.value(), " is not held by the prefix tier");
  index_.erase(info_[host.value()].hash.value());
  info_[host.value()] = HostBlockInfo{};
  lru_.remove(host);
}

}  // namespace kvserve::cache
