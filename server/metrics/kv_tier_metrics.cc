#include "server/metrics/kv_tier_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace kvserve::server {

void KvTierMetrics::Series::Advance(uint64_t now) {
  // A counter only grows; a smaller value would mean a restarted source: count it whole.
  const uint64_t delta = now >= last ? now - last : now;
  if (delta > 0) counter->Increment(static_cast<double>(delta));
  last = now;
}

KvTierMetrics::KvTierMetrics(prometheus::Registry& r, const std::string& model_name) {
  const prometheus::Labels m = {{"model", model_name}};
  auto family = [&](const std::string& name, const std::string& help) -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(m).Register(r);
  };
  auto& lookups = family("kvserve_kv_tier_lookup_blocks_total", "Prefix blocks looked up, by tier.");
  auto& hits = family("kvserve_kv_tier_hit_blocks_total",
                      "Prefix blocks that served a prompt, by the tier that served them.");
  auto& hit_tokens = family("kvserve_kv_tier_hit_tokens_total",
                            "Prompt tokens served from cached KV, by the tier that served them.");
  auto& read = family("kvserve_kv_tier_read_bytes_total",
                      "KV bytes read from a tier (host: loaded into the pool; remote: fetched).");
  auto& written = family("kvserve_kv_tier_written_bytes_total",
                         "KV bytes written to a tier (host: offloaded from the pool; remote: stored).");
  for (int t = 0; t < kTiers; ++t) {
    const prometheus::Labels l = {{"tier", engine::KvTierStats::TierName(t)}};
    lookups_[t].counter = &lookups.Add(l);
    hits_[t].counter = &hits.Add(l);
    hit_tokens_[t].counter = &hit_tokens.Add(l);
    read_[t].counter = &read.Add(l);
    written_[t].counter = &written.Add(l);
  }
  auto& errors = family("kvserve_kv_tier_errors_total",
                        "Tier failures: remote transport errors, rejected records (mismatch, truncated, "
                        "corrupt), dropped writes; host blocks dropped for lack of room.");
  remote_transport_.counter = &errors.Add({{"tier", "remote"}, {"kind", "transport"}});
  remote_rejected_.counter = &errors.Add({{"tier", "remote"}, {"kind", "rejected"}});
  remote_dropped_.counter = &errors.Add({{"tier", "remote"}, {"kind", "dropped_write"}});
  host_dropped_.counter = &errors.Add({{"tier", "host"}, {"kind", "dropped"}});
  remote_load_ = &prometheus::BuildHistogram()
                      .Name("kvserve_kv_tier_load_seconds")
                      .Help("Latency of a remote tier lookup, queued to answered.")
                      .Labels(m)
                      .Register(r)
                      .Add({{"tier", "remote"}},
                           prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                                   0.1, 0.2, 0.5, 1.0});
  remote_up_ = &prometheus::BuildGauge()
                    .Name("kvserve_kv_tier_remote_up")
                    .Help("1 while the remote KV tier answers, 0 while it is down (local tiers only).")
                    .Labels(m)
                    .Register(r)
                    .Add({});
  auto& host = prometheus::BuildGauge()
                   .Name("kvserve_kv_tier_host_blocks")
                   .Help("Host prefix tier blocks: held now, capacity.")
                   .Labels(m)
                   .Register(r);
  host_held_ = &host.Add({{"state", "held"}});
  host_capacity_ = &host.Add({{"state", "capacity"}});
}

void KvTierMetrics::Update(const engine::KvTierStats& s) {
  for (int t = 0; t < kTiers; ++t) {
    lookups_[t].Advance(s.lookup_blocks[t]);
    hits_[t].Advance(s.hit_blocks[t]);
    hit_tokens_[t].Advance(s.hit_blocks[t] * static_cast<uint64_t>(s.block_size));
    read_[t].Advance(s.read_bytes[t]);
    written_[t].Advance(s.written_bytes[t]);
  }
  remote_transport_.Advance(s.remote_errors);
  remote_rejected_.Advance(s.remote_rejected_blocks);
  remote_dropped_.Advance(s.remote_dropped_writes);
  host_dropped_.Advance(s.host_dropped_blocks);
  for (double v : s.remote_load_seconds) remote_load_->Observe(v);
  remote_up_->Set(s.remote_enabled && s.remote_up ? 1.0 : 0.0);
  host_held_->Set(static_cast<double>(s.host_blocks));
  host_capacity_->Set(static_cast<double>(s.host_capacity_blocks));
}

}  // namespace kvserve::server
