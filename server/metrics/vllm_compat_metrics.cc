#include "server/metrics/vllm_compat_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <vector>


namespace kvserve::server {
namespace {

// vLLM's buckets, verbatim, so that dashboards built for vLLM read the same quantiles.
const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                        1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return b;
}
const std::vector<double>& ItlBuckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                        0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}
const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> b = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}
const std::vector<double>& IterationTokenBuckets() {
  static const std::vector<double> b = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  return b;
}
// vLLM builds 1-2-5 buckets up to max_model_len; kvserve's models stay far below 1M tokens.
const std::vector<double>& LengthBuckets() {
  static const std::vector<double> b = {1,    2,    5,    10,    20,    50,    100,    200,    500,
                                        1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000};
  return b;
}

double Seconds(base::Nanos ns) { return static_cast<double>(ns) * 1e-9; }

prometheus::Gauge* Gauge(prometheus::Registry& r, const prometheus::Labels& labels, const std::string& name,
                         const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(r).Add({});
}
prometheus::Counter* Counter(prometheus::Registry& r, const prometheus::Labels& labels, const std::string& name,
                             const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r).Add({});
}
prometheus::Histogram* Histogram(prometheus::Registry& r, const prometheus::Labels& labels,
                                 const std::string& name, const std::string& help,
                                 const std::vector<double>& buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Labels(labels).Register(r).Add({}, buckets);
}

}  // namespace

VllmCompatMetrics::VllmCompatMetrics(prometheus::Registry& r, const std::string& model_name)
    : model_name_(model_name) {
  // vLLM labels every series with the served model and the data-parallel engine index.
  const prometheus::Labels l = {{"model_name", model_name}, {"engine", "0"}};
  running_ = Gauge(r, l, "vllm:num_requests_running", "Number of requests in model execution batches.");
  waiting_ = Gauge(r, l, "vllm:num_requests_waiting", "Number of requests waiting to be processed.");
  kv_usage_ = Gauge(r, l, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.");
  gpu_cache_usage_ = Gauge(r, l, "vllm:gpu_cache_usage_perc",
                           "KV-cache usage. 1 means 100 percent usage (deprecated alias).");
  prefix_queries_ = Counter(r, l, "vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.");
  prefix_hits_ = Counter(r, l, "vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.");
  preemptions_ = Counter(r, l, "vllm:num_preemptions_total", "Cumulative number of preemptions.");
  spec_drafts_ =
      Counter(r, l, "vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.");
  spec_draft_tokens_ =
      Counter(r, l, "vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.");
  spec_accepted_tokens_ =
      Counter(r, l, "vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.");
  spec_accepted_per_pos_ = &prometheus::BuildCounter()
                                .Name("vllm:spec_decode_num_accepted_tokens_per_pos_total")
                                .Help("Accepted tokens per draft position.")
                                .Labels(l)
                                .Register(r);
  prompt_tokens_ = Counter(r, l, "vllm:prompt_tokens_total", "Number of prefill tokens processed.");
  generation_tokens_ = Counter(r, l, "vllm:generation_tokens_total", "Number of generation tokens processed.");
  success_ = &prometheus::BuildCounter()
                  .Name("vllm:request_success_total")
                  .Help("Count of successfully processed requests.")
                  .Labels(l)
                  .Register(r);
  iteration_tokens_ = Histogram(r, l, "vllm:iteration_tokens_total", "Number of tokens per engine step.",
                                IterationTokenBuckets());
  request_prompt_tokens_ = Histogram(r, l, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                     LengthBuckets());
  request_generation_tokens_ = Histogram(r, l, "vllm:request_generation_tokens",
                                         "Number of generation tokens processed.", LengthBuckets());
  ttft_ = Histogram(r, l, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                    TtftBuckets());
  itl_ = Histogram(r, l, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                   ItlBuckets());
  tpot_ = Histogram(r, l, "vllm:time_per_output_token_seconds",
                    "Histogram of time per output token in seconds (deprecated: inter-token latency).",
                    ItlBuckets());
  request_tpot_ = Histogram(r, l, "vllm:request_time_per_output_token_seconds",
                            "Histogram of time_per_output_token_seconds per request.", ItlBuckets());
  e2e_ = Histogram(r, l, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                   RequestLatencyBuckets());
  queue_ = Histogram(r, l, "vllm:request_queue_time_seconds",
                     "Histogram of time spent in WAITING phase for request.", RequestLatencyBuckets());
  inference_ = Histogram(r, l, "vllm:request_inference_time_seconds",
                         "Histogram of time spent in RUNNING phase for request.", RequestLatencyBuckets());
  prefill_ = Histogram(r, l, "vllm:request_prefill_time_seconds",
                       "Histogram of time spent in PREFILL phase for request.", RequestLatencyBuckets());
  decode_ = Histogram(r, l, "vllm:request_decode_time_seconds",
                      "Histogram of time spent in DECODE phase for request.", RequestLatencyBuckets());
}

void VllmCompatMetrics::OnTokens(int count, base::Nanos inter_token_ns) {
  generation_tokens_->Increment(count);
  if (inter_token_ns > 0) {
    itl_->Observe(Seconds(inter_token_ns));
    tpot_->Observe(Seconds(inter_token_ns));
  }
}

void VllmCompatMetrics::OnRequestFinished(const engine::RequestTimeline& t) {
  success_->Add({{"finished_reason", std::string(engine::Name(t.finish))}}).Increment();
  prompt_tokens_->Increment(static_cast<double>(t.prompt_tokens));
  request_prompt_tokens_->Observe(static_cast<double>(t.prompt_tokens));
  request_generation_tokens_->Observe(static_cast<double>(t.generation_tokens));
  if (t.finished > 0) e2e_->Observe(Seconds(t.finished - t.arrival));
  if (t.first_scheduled > 0) {
    queue_->Observe(Seconds(t.first_scheduled - t.arrival));
    if (t.finished > 0) inference_->Observe(Seconds(t.finished - t.first_scheduled));
  }
  if (t.first_token > 0) {
    ttft_->Observe(Seconds(t.first_token - t.arrival));
    prefill_->Observe(Seconds(t.prefill_ns));
    decode_->Observe(Seconds(t.decode_ns));
    if (t.generation_tokens > 1) {
      request_tpot_->Observe(Seconds(t.decode_ns) / static_cast<double>(t.generation_tokens - 1));
    }
  }
}

void VllmCompatMetrics::OnStep(const engine::StepStats& s, int64_t prefix_queries, int64_t prefix_hits) {
  running_->Set(s.running);
  waiting_->Set(s.waiting);
  kv_usage_->Set(s.kv_usage);
  gpu_cache_usage_->Set(s.kv_usage);
  if (prefix_queries > 0) prefix_queries_->Increment(static_cast<double>(prefix_queries));
  if (prefix_hits > 0) prefix_hits_->Increment(static_cast<double>(prefix_hits));
  if (s.preemptions > 0) preemptions_->Increment(s.preemptions);
  if (s.spec_drafts > 0) {
    spec_drafts_->Increment(s.spec_drafts);
    spec_draft_tokens_->Increment(s.spec_draft_tokens);
    spec_accepted_tokens_->Increment(s.spec_accepted_tokens);
    for (size_t i = 0; i < s.spec_accepted_per_position.size(); ++i) {
      spec_accepted_per_pos_->Add({{"position", std::to_string(i)}})
          .Increment(static_cast<double>(s.spec_accepted_per_position[i]));
    }
  }
  const int tokens = s.num_prefill_tokens + s.num_decode_tokens;
  if (s.ran_batch && tokens > 0) iteration_tokens_->Observe(tokens);
}

}  // namespace kvserve::server
