// Prometheus series of the tiered prefix cache (kvserve_kv_tier_*), fed by the engine's
// cumulative KvTierStats (engine_observer.h). Counters advance by the difference to the last
// report, so a snapshot may be reported any number of times. Part of PrometheusMetrics
// (it registers in the same registry and runs under its mutex); prometheus-cpp stays here.
//
//   kvserve_kv_tier_lookup_blocks_total{tier}    blocks looked up (device, host, remote)
//   kvserve_kv_tier_hit_blocks_total{tier}       blocks that served a prompt, once each
//   kvserve_kv_tier_hit_tokens_total{tier}       the same in tokens
//   kvserve_kv_tier_read_bytes_total{tier}       host: loaded to the pool; remote: fetched
//   kvserve_kv_tier_written_bytes_total{tier}    host: offloaded; remote: stored
//   kvserve_kv_tier_errors_total{tier,kind}      remote transport|rejected|dropped_write,
//                                                host dropped (no room for an evicted block)
//   kvserve_kv_tier_load_seconds{tier="remote"}  lookup latency (queued -> answered)
//   kvserve_kv_tier_remote_up                    1 while the remote tier answers
//   kvserve_kv_tier_host_blocks{state}           held / capacity of the host prefix tier
#pragma once

#include <array>
#include <cstdint>

#include "engine/engine_observer.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace kvserve::server {

class KvTierMetrics {
 public:
  KvTierMetrics(prometheus::Registry& registry, const std::string& model_name);
  void Update(const engine::KvTierStats& s);

 private:
  static constexpr int kTiers = engine::KvTierStats::kNumTiers;
  struct Series {
    prometheus::Counter* counter = nullptr;
    uint64_t last = 0;
    void Advance(uint64_t now);
  };
  std::array<Series, kTiers> lookups_, hits_, hit_tokens_, read_, written_;
  Series remote_transport_, remote_rejected_, remote_dropped_, host_dropped_;
  prometheus::Histogram* remote_load_ = nullptr;
  prometheus::Gauge* remote_up_ = nullptr;
  prometheus::Gauge* host_held_ = nullptr;
  prometheus::Gauge* host_capacity_ = nullptr;
};

}  // namespace kvserve::server
