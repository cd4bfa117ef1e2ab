// VllmCompatMetrics: the vLLM (V1 engine) metric names, for autoscalers and inference
// gateways that already read them (KEDA on vllm:num_requests_waiting, the Gateway API
// Inference Extension on vllm:kv_cache_usage_perc, ...). Enabled by
// `--metrics-compat vllm`; fed by PrometheusMetrics with the same events as the kvserve_
// names, into the same registry. Names, labels (model_name, engine) and bucket boundaries
// follow vLLM's loggers.py (see ../shared/reference/ecosystem.md §3.1), including its
// quirks: kv_cache_usage_perc is a 0-1 fraction, counters carry _total in the name.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine_observer.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server {

class VllmCompatMetrics {
 public:
  VllmCompatMetrics(prometheus::Registry& registry, const std::string& model_name);

  // Same threading contract as PrometheusMetrics' hooks (thread-safe, never blocking).
  void OnTokens(int count, base::Nanos inter_token_ns);
  void OnRequestFinished(const engine::RequestTimeline& timeline);
  // `prefix_queries` / `prefix_hits`: tokens since the previous step.
  void OnStep(const engine::StepStats& step, int64_t prefix_queries, int64_t prefix_hits);

 private:
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Gauge* gpu_cache_usage_;  // deprecated alias still read by older dashboards
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_accepted_per_pos_;  // label position (0-based)
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Histogram* request_prompt_tokens_;
  prometheus::Histogram* request_generation_tokens_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* tpot_;          // deprecated name of the inter-token latency
  prometheus::Histogram* request_tpot_;  // per-request mean
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* inference_;
  prometheus::Histogram* prefill_;
  prometheus::Histogram* decode_;
  std::string model_name_;
};

}  // namespace kvserve::server
