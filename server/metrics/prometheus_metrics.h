// PrometheusMetrics: the engine's observer hooks and the front ends' response hooks bound to
// prometheus-cpp, and the /metrics exposition (prometheus::TextSerializer over the
// registry). prometheus-cpp types stay in this folder: engine/ only knows EngineObserver.
//
//   engine thread ── OnStep / OnTokens / OnRequestFinished / OnCompressionRound ──┐
//   HTTP workers  ── OnHttpResponse(route, status) ───────────────────────────────┤► Registry
//   gRPC threads  ── OnGrpcStatus(method, code) ──────────────────────────────────┘     │
//   GET /metrics  ◄── ExpositionText() ◄── TextSerializer ◄── Registry::Collect() ◄────┘
//
// Every name starts with kvserve_ and uses base units; docs/operations.md lists them. Labels
// are bounded: `model` is constant, `tenant` is a configured tenant (anything else becomes
// "other"), `policy` a compression policy name, `finished_reason` one of four values, HTTP
// `route` a registered route or "unmatched". Series are created on first use, so a policy
// nobody asked for exports nothing.
//
// With `--metrics-compat vllm` the same events also feed VllmCompatMetrics (vllm: names).
//
// Thread safety: all hooks may run concurrently with each other and with ExpositionText.
// Engine hooks take a short uncontended mutex to find their series and never wait on I/O.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "engine/engine_observer.h"
#include "server/errors/rate_limit_status.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server {

class VllmCompatMetrics;
class LoraMetrics;
class KvTierMetrics;
class RateLimitMetrics;

struct PrometheusMetricsOptions {
  std::string model_name;            // value of the `model` label
  std::vector<std::string> tenants;  // configured tenant names ("default" is always allowed)
  bool vllm_compat = false;          // also export the vLLM names (server.metrics_compat=vllm)
};

class PrometheusMetrics final : public engine::EngineObserver {
 public:
  explicit PrometheusMetrics(PrometheusMetricsOptions options);
  ~PrometheusMetrics() override;
  PrometheusMetrics(const PrometheusMetrics&) = delete;
  PrometheusMetrics& operator=(const PrometheusMetrics&) = delete;

  // engine::EngineObserver
  void OnTokens(const engine::RequestLabels& labels, int count, base::Nanos inter_token_ns) override;
  void OnRequestFinished(const engine::RequestTimeline& timeline) override;
  void OnRequestRejected(const engine::RequestLabels& labels, const std::string& reason) override;
  void OnStep(const engine::StepStats& step) override;
  void OnLoraState(const engine::LoraState& state) override;
  void OnCompressionRound(const engine::CompressionRoundStats& round) override;
  void OnKvTiers(const engine::KvTierStats& tiers) override;

  // Front-end hooks. `route` must come from a bounded set (the registered routes).
  void OnHttpResponse(std::string_view route, int status);
  // `code` is a grpc::StatusCode value; `method` a full method name ("/pkg.Service/Method").
  void OnGrpcStatus(std::string_view method, int code);
  // A tenant rate-limit decision (TenantRateLimiter::Observer): kvserve_rate_limit* series.
  void OnRateLimit(std::string_view tenant, const RateLimitState& state, std::string_view refused_by);

  // Prometheus text exposition format 0.0.4 of every metric.
  std::string ExpositionText() const;

  // Bucket boundaries of the evicted-position histograms (also used by the tests).
  static const std::vector<double>& RelativePositionBuckets();
  static const std::vector<double>& AgeBuckets();

 private:
  struct RequestSeries;  // per (tenant, policy)
  struct PolicySeries;   // per policy

  // The label value for a tenant / policy name: the name itself when it is a configured
  // tenant / a known policy, else "other". Views into the argument or static storage, so
  // the per-token path allocates nothing.
  absl::string_view Tenant(const std::string& tenant) const;
  static absl::string_view Policy(const std::string& policy);
  RequestSeries& SeriesFor(const engine::RequestLabels& labels);  // mu_ held
  PolicySeries& PolicySeriesFor(const std::string& policy);       // mu_ held

  const PrometheusMetricsOptions options_;
  const absl::flat_hash_set<std::string> tenants_;
  std::shared_ptr<prometheus::Registry> registry_;

  // ---- families (owned by registry_)
  // Per request, labels tenant + policy.
  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* e2e_;
  prometheus::Family<prometheus::Histogram>* queue_time_;
  prometheus::Family<prometheus::Histogram>* prefill_time_;
  prometheus::Family<prometheus::Histogram>* decode_time_;
  prometheus::Family<prometheus::Histogram>* tpot_;
  prometheus::Family<prometheus::Histogram>* itl_;
  prometheus::Family<prometheus::Histogram>* request_prompt_tokens_;
  prometheus::Family<prometheus::Histogram>* request_generation_tokens_;
  prometheus::Family<prometheus::Histogram>* compression_ratio_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_;
  prometheus::Family<prometheus::Counter>* generation_tokens_;
  prometheus::Family<prometheus::Counter>* cached_prompt_tokens_;
  prometheus::Family<prometheus::Counter>* request_success_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* compression_requests_;
  prometheus::Family<prometheus::Counter>* compression_rounds_;
  prometheus::Family<prometheus::Counter>* evicted_tokens_;
  // Per policy.
  prometheus::Family<prometheus::Histogram>* round_duration_;
  prometheus::Family<prometheus::Histogram>* phase_duration_;
  prometheus::Family<prometheus::Counter>* blocks_reclaimed_;
  prometheus::Family<prometheus::Counter>* bytes_moved_;
  prometheus::Family<prometheus::Counter>* demoted_tokens_;
  prometheus::Family<prometheus::Histogram>* evicted_relative_position_;
  prometheus::Family<prometheus::Histogram>* evicted_age_;
  // Edge.
  prometheus::Family<prometheus::Counter>* http_requests_;
  prometheus::Family<prometheus::Counter>* grpc_requests_;

  // Engine-wide (model label only), fed by OnStep.
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* swapped_;
  prometheus::Gauge* kv_usage_;
  prometheus::Gauge* blocks_free_;
  prometheus::Gauge* blocks_used_;
  prometheus::Gauge* host_usage_;
  prometheus::Gauge* host_blocks_free_;
  prometheus::Gauge* host_blocks_used_;
  prometheus::Gauge* demote_blocks_free_;
  prometheus::Gauge* demote_blocks_used_;
  prometheus::Gauge* live_logical_;
  prometheus::Gauge* live_physical_;
  prometheus::Family<prometheus::Gauge>* kv_bytes_per_token_;  // {side, dtype}
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_accepted_per_pos_;
  prometheus::Histogram* step_duration_;
  prometheus::Histogram* step_tokens_;
  prometheus::Histogram* step_seqs_;

  std::unique_ptr<VllmCompatMetrics> vllm_;  // null unless options_.vllm_compat
  std::unique_ptr<RateLimitMetrics> rate_limits_;  // thread-safe by itself (no mu_)
  std::unique_ptr<LoraMetrics> lora_;              // thread-safe by itself (no mu_)

  std::mutex mu_;  // guards the series caches and the prefix cursors below
  std::unique_ptr<KvTierMetrics> kv_tiers_;  // kvserve_kv_tier_* (kv_tier_metrics.h); under mu_
  // tenant -> policy -> series (keys are label values, so both levels stay bounded).
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::unique_ptr<RequestSeries>>> request_series_;
  absl::flat_hash_map<std::string, std::unique_ptr<PolicySeries>> policy_series_;
  // StepStats carries cumulative prefix counts; counters advance by the difference.
  int64_t last_prefix_queries_ = 0;
  int64_t last_prefix_hits_ = 0;
};

}  // namespace kvserve::server
