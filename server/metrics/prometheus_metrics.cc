#include "server/metrics/prometheus_metrics.h"

#include "server/metrics/kv_tier_metrics.h"
#include "server/metrics/rate_limit_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <chrono>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "base/absl_compat.h"
#include "config/fields.h"
#include "server/metrics/lora_metrics.h"
#include "server/metrics/vllm_compat_metrics.h"

namespace kvserve::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

constexpr char kOther[] = "other";

// Request-level latencies. Finer at the low end than vLLM's (which start at 0.3 s) because a
// small model on CPU answers short requests in tens of milliseconds.
const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,  0.5,   1.0,
                                        2.5,   5.0,    10.0,  20.0, 40.0,  80.0, 160.0, 320.0, 640.0};
  return b;
}
// Per-token latencies (inter-token, time per output token).
const std::vector<double>& TokenLatencyBuckets() {
  static const std::vector<double> b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                        0.15,   0.2,   0.3,    0.5,   0.75, 1.0,   2.5,  5.0,   10.0};
  return b;
}
// Engine steps and compression rounds: sub-millisecond to seconds.
const std::vector<double>& StepBuckets() {
  static const std::vector<double> b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0};
  return b;
}
std::vector<double> PowersOfTwo(int max_exponent) {
  std::vector<double> b;
  for (int e = 0; e <= max_exponent; ++e) b.push_back(static_cast<double>(int64_t{1} << e));
  return b;
}
const std::vector<double>& CountBuckets() {
  static const std::vector<double> b = PowersOfTwo(14);  // 1 .. 16384 tokens or sequences
  return b;
}
const std::vector<double>& LengthBuckets() {
  static const std::vector<double> b = {1,    2,    5,    10,    20,    50,    100,    200,    500,
                                        1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000};
  return b;
}
// Tokens seen / peak tokens held: 1 for `full`, budget-bound for the compressing policies.
const std::vector<double>& RatioBuckets() {
  static const std::vector<double> b = {1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0, 128.0};
  return b;
}

double Seconds(base::Nanos ns) { return static_cast<double>(std::max<base::Nanos>(ns, 0)) * 1e-9; }

// Prometheus bucket of `v` (le semantics: the first bound >= v; the last slot is +Inf).
size_t BucketIndex(const std::vector<double>& bounds, double v) {
  return static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

std::string_view GrpcCodeName(int code) {
  static constexpr std::string_view kNames[] = {
      "OK",           "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND",    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",      "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",         "UNAVAILABLE",
      "DATA_LOSS",    "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

// Keeps label values bounded even if a caller passes free text.
std::string BoundedToken(std::string_view s) {
  if (s.empty() || s.size() > 40) return kOther;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) || c == '_' || std::isdigit(static_cast<unsigned char>(c)))) {
      return kOther;
    }
  }
  return std::string(s);
}

template <typename T>
Family<T>* Build(prometheus::Registry& r, const Labels& constant, const std::string& name, const std::string& help);

template <>
Family<Counter>* Build<Counter>(prometheus::Registry& r, const Labels& constant, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Labels(constant).Register(r);
}
template <>
Family<Gauge>* Build<Gauge>(prometheus::Registry& r, const Labels& constant, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Labels(constant).Register(r);
}
template <>
Family<Histogram>* Build<Histogram>(prometheus::Registry& r, const Labels& constant, const std::string& name,
                                    const std::string& help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Labels(constant).Register(r);
}

}  // namespace

struct PrometheusMetrics::RequestSeries {
  Histogram* ttft;
  Histogram* e2e;
  Histogram* queue_time;
  Histogram* prefill_time;
  Histogram* decode_time;
  Histogram* tpot;
  Histogram* itl;
  Histogram* prompt_len;
  Histogram* generation_len;
  Histogram* compression_ratio;
  Counter* prompt_tokens;
  Counter* generation_tokens;
  Counter* cached_prompt_tokens;
  Counter* compression_requests;
  Counter* rounds;
  Counter* evicted_prompt;
  Counter* evicted_generated;
  std::array<Counter*, 4> success;  // by engine::FinishReason
};

struct PrometheusMetrics::PolicySeries {
  Histogram* round_duration;
  std::array<Histogram*, 3> phase;  // score, select, compact
  Counter* blocks_reclaimed;
  Counter* bytes_moved;
  Counter* demoted_tokens;
  Histogram* relative_position;
  Histogram* age;
};

const std::vector<double>& PrometheusMetrics::RelativePositionBuckets() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (int i = 1; i <= 20; ++i) v.push_back(i * 0.05);
    v.back() = 1.0;  // exactly, not 20 * 0.05
    return v;
  }();
  return b;
}

const std::vector<double>& PrometheusMetrics::AgeBuckets() {
  static const std::vector<double> b = PowersOfTwo(17);  // 1 .. 131072 tokens
  return b;
}

PrometheusMetrics::PrometheusMetrics(PrometheusMetricsOptions options)
    : options_(std::move(options)),
      tenants_([&] {
        absl::flat_hash_set<std::string> t(options_.tenants.begin(), options_.tenants.end());
        t.insert("default");
        return t;
      }()),
      registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  const Labels m = {{"model", options_.model_name}};
  kv_tiers_ = std::make_unique<KvTierMetrics>(r, options_.model_name);
  rate_limits_ = std::make_unique<RateLimitMetrics>(r, options_.model_name);
  lora_ = std::make_unique<LoraMetrics>(r, options_.model_name);

  ttft_ = Build<Histogram>(r, m, "kvserve_time_to_first_token_seconds",
                           "Time from arrival at the engine to the first generated token.");
  e2e_ = Build<Histogram>(r, m, "kvserve_e2e_request_latency_seconds",
                          "Time from arrival at the engine to the request's last token.");
  queue_time_ = Build<Histogram>(r, m, "kvserve_request_queue_time_seconds",
                                 "Time from arrival to the first step that scheduled the request.");
  prefill_time_ = Build<Histogram>(r, m, "kvserve_request_prefill_time_seconds",
                                   "Time from first scheduled to the first generated token.");
  decode_time_ = Build<Histogram>(r, m, "kvserve_request_decode_time_seconds",
                                  "Time from the first to the last generated token.");
  tpot_ = Build<Histogram>(r, m, "kvserve_time_per_output_token_seconds",
                           "Per request: decode time / (generated tokens - 1).");
  itl_ = Build<Histogram>(r, m, "kvserve_inter_token_latency_seconds",
                          "Time between two consecutive tokens of a request.");
  request_prompt_tokens_ = Build<Histogram>(r, m, "kvserve_request_prompt_tokens", "Prompt length per request.");
  request_generation_tokens_ = Build<Histogram>(r, m, "kvserve_request_generation_tokens",
                                                "Generated tokens per request (all samples).");
  compression_ratio_ = Build<Histogram>(r, m, "kvserve_kv_compression_ratio",
                                        "Per request at its end: tokens seen / peak KV tokens held.");
  prompt_tokens_ = Build<Counter>(r, m, "kvserve_prompt_tokens_total", "Prompt tokens of finished requests.");
  generation_tokens_ = Build<Counter>(r, m, "kvserve_generation_tokens_total", "Generated tokens.");
  cached_prompt_tokens_ = Build<Counter>(r, m, "kvserve_cached_prompt_tokens_total",
                                         "Prompt tokens of finished requests served from the prefix cache.");
  request_success_ = Build<Counter>(r, m, "kvserve_request_success_total",
                                    "Finished requests by finished_reason (stop, length, abort, error).");
  rejected_ = Build<Counter>(r, m, "kvserve_requests_rejected_total", "Requests the engine refused, by reason.");
  compression_requests_ = Build<Counter>(r, m, "kvserve_kv_compression_requests_total",
                                         "Finished requests by KV compression policy.");
  compression_rounds_ = Build<Counter>(r, m, "kvserve_kv_compression_rounds_total", "KV compression rounds.");
  evicted_tokens_ = Build<Counter>(r, m, "kvserve_kv_evicted_tokens_total",
                                   "Tokens whose KV compression evicted, by origin (prompt, generated).");
  round_duration_ = Build<Histogram>(r, m, "kvserve_kv_compression_round_duration_seconds",
                                     "Duration of one compression round (score + select + compact).");
  phase_duration_ = Build<Histogram>(r, m, "kvserve_kv_compression_phase_duration_seconds",
                                     "Duration of one phase (score, select, compact) of a compression round.");
  blocks_reclaimed_ = Build<Counter>(r, m, "kvserve_kv_compression_blocks_reclaimed_total",
                                     "KV blocks returned to the pool by compression.");
  bytes_moved_ = Build<Counter>(r, m, "kvserve_kv_compaction_moved_bytes_total",
                                "KV bytes copied by compaction.");
  demoted_tokens_ = Build<Counter>(r, m, "kvserve_kv_demoted_tokens_total",
                                   "Tokens compression rounds moved into lower-precision tiers (per KV row).");
  evicted_relative_position_ = Build<Histogram>(
      r, m, "kvserve_kv_evicted_token_relative_position",
      "Evicted tokens by position p relative to the sequence length t when evicted (p / t).");
  evicted_age_ = Build<Histogram>(r, m, "kvserve_kv_evicted_token_age_tokens",
                                  "Evicted tokens by age t - p (tokens since the token was seen).");
  http_requests_ = Build<Counter>(r, m, "kvserve_http_requests_total", "HTTP responses by route and status code.");
  grpc_requests_ = Build<Counter>(r, m, "kvserve_grpc_requests_total", "gRPC calls by method and status code.");

  auto gauge = [&](const std::string& name, const std::string& help, const Labels& l = {}) {
    return &Build<Gauge>(r, m, name, help)->Add(l);
  };
  running_ = gauge("kvserve_num_requests_running", "Sequences in the running set.");
  waiting_ = gauge("kvserve_num_requests_waiting", "Sequences waiting for admission.");
  swapped_ = gauge("kvserve_num_requests_swapped", "Sequences swapped out to the host tier.");
  kv_usage_ = gauge("kvserve_kv_cache_usage_ratio", "Fraction of KV pool blocks in use (0-1).");
  auto* blocks = Build<Gauge>(r, m, "kvserve_kv_cache_blocks", "KV pool blocks by state (free, used).");
  blocks_free_ = &blocks->Add({{"state", "free"}});
  blocks_used_ = &blocks->Add({{"state", "used"}});
  host_usage_ = gauge("kvserve_kv_host_swap_usage_ratio", "Fraction of host swap tier blocks in use (0-1).");
  auto* host = Build<Gauge>(r, m, "kvserve_kv_host_swap_blocks", "Host swap tier blocks by state (free, used).");
  host_blocks_free_ = &host->Add({{"state", "free"}});
  host_blocks_used_ = &host->Add({{"state", "used"}});
  auto* demote = Build<Gauge>(r, m, "kvserve_kv_demote_tier_blocks",
                              "Demotion tier pool blocks (all tiers) by state (free, granted to sequences).");
  demote_blocks_free_ = &demote->Add({{"state", "free"}});
  demote_blocks_used_ = &demote->Add({{"state", "used"}});
  live_logical_ = gauge("kvserve_kv_live_logical_tokens", "Tokens the running sequences have seen.");
  live_physical_ = gauge("kvserve_kv_live_physical_tokens", "Tokens whose KV the running sequences hold.");
  kv_bytes_per_token_ = Build<Gauge>(r, m, "kvserve_kv_bytes_per_token",
                                     "KV bytes one token costs, by side (key, value) and precision: all layers, "
                                     "scales included.");
  prefix_queries_ = &Build<Counter>(r, m, "kvserve_prefix_cache_queries_total",
                                    "Prompt tokens looked up in the prefix cache.")->Add({});
  prefix_hits_ = &Build<Counter>(r, m, "kvserve_prefix_cache_hits_total",
                                 "Prompt tokens found in the prefix cache.")->Add({});
  preemptions_ = &Build<Counter>(r, m, "kvserve_num_preemptions_total", "Sequences preempted.")->Add({});
  spec_drafts_ = &Build<Counter>(r, m, "kvserve_spec_decode_num_drafts_total",
                                 "Speculative decoding: drafts verified.")
                      ->Add({});
  spec_draft_tokens_ = &Build<Counter>(r, m, "kvserve_spec_decode_num_draft_tokens_total",
                                       "Speculative decoding: guessed tokens verified.")
                            ->Add({});
  spec_accepted_tokens_ = &Build<Counter>(r, m, "kvserve_spec_decode_num_accepted_tokens_total",
                                          "Speculative decoding: guessed tokens accepted.")
                               ->Add({});
  spec_accepted_per_pos_ =
      Build<Counter>(r, m, "kvserve_spec_decode_num_accepted_tokens_per_pos_total",
                     "Speculative decoding: guesses accepted, by position in their draft "
                     "(0: the first guess).");
  step_duration_ = &Build<Histogram>(r, m, "kvserve_engine_step_duration_seconds",
                                     "Duration of one engine step (schedule + execute + update).")
                        ->Add({}, StepBuckets());
  step_tokens_ = &Build<Histogram>(r, m, "kvserve_engine_step_tokens", "Tokens (prefill + decode) per engine step.")
                      ->Add({}, CountBuckets());
  step_seqs_ = &Build<Histogram>(r, m, "kvserve_engine_step_sequences", "Sequences per engine step.")
                    ->Add({}, CountBuckets());

  if (options_.vllm_compat) vllm_ = std::make_unique<VllmCompatMetrics>(r, options_.model_name);
}

PrometheusMetrics::~PrometheusMetrics() = default;

absl::string_view PrometheusMetrics::Tenant(const std::string& tenant) const {
  if (tenant.empty()) return "default";
  return tenants_.contains(tenant) ? absl::string_view(tenant) : absl::string_view(kOther);
}

absl::string_view PrometheusMetrics::Policy(const std::string& policy) {
  static const absl::flat_hash_set<std::string> kPolicies = {"full", "triattention", "streamingllm",
                                                             "snapkv", "h2o", "auto"};
  if (policy.empty()) return "full";
  return kPolicies.contains(policy) ? absl::string_view(policy) : absl::string_view(kOther);
}

PrometheusMetrics::RequestSeries& PrometheusMetrics::SeriesFor(const engine::RequestLabels& labels) {
  const absl::string_view tenant_view = Tenant(labels.tenant);
  const absl::string_view policy_view = Policy(labels.policy);
  std::unique_ptr<RequestSeries>& slot = request_series_[tenant_view][policy_view];
  if (slot) return *slot;
  const std::string tenant(tenant_view);
  const std::string policy(policy_view);
  const Labels l = {{"tenant", tenant}, {"policy", policy}};
  auto s = std::make_unique<RequestSeries>();
  s->ttft = &ttft_->Add(l, LatencyBuckets());
  s->e2e = &e2e_->Add(l, LatencyBuckets());
  s->queue_time = &queue_time_->Add(l, LatencyBuckets());
  s->prefill_time = &prefill_time_->Add(l, LatencyBuckets());
  s->decode_time = &decode_time_->Add(l, LatencyBuckets());
  s->tpot = &tpot_->Add(l, TokenLatencyBuckets());
  s->itl = &itl_->Add(l, TokenLatencyBuckets());
  s->prompt_len = &request_prompt_tokens_->Add(l, LengthBuckets());
  s->generation_len = &request_generation_tokens_->Add(l, LengthBuckets());
  s->compression_ratio = &compression_ratio_->Add(l, RatioBuckets());
  s->prompt_tokens = &prompt_tokens_->Add(l);
  s->generation_tokens = &generation_tokens_->Add(l);
  s->cached_prompt_tokens = &cached_prompt_tokens_->Add(l);
  s->compression_requests = &compression_requests_->Add(l);
  s->rounds = &compression_rounds_->Add(l);
  s->evicted_prompt = &evicted_tokens_->Add({{"tenant", tenant}, {"policy", policy}, {"origin", "prompt"}});
  s->evicted_generated = &evicted_tokens_->Add({{"tenant", tenant}, {"policy", policy}, {"origin", "generated"}});
  for (engine::FinishReason f : {engine::FinishReason::kStop, engine::FinishReason::kLength,
                                 engine::FinishReason::kAbort, engine::FinishReason::kError}) {
    s->success[static_cast<size_t>(f)] = &request_success_->Add(
        {{"tenant", tenant}, {"policy", policy}, {"finished_reason", std::string(engine::Name(f))}});
  }
  slot = std::move(s);
  return *slot;
}

PrometheusMetrics::PolicySeries& PrometheusMetrics::PolicySeriesFor(const std::string& raw_policy) {
  const absl::string_view policy_view = Policy(raw_policy);
  std::unique_ptr<PolicySeries>& slot = policy_series_[policy_view];
  if (slot) return *slot;
  const std::string policy(policy_view);
  const Labels l = {{"policy", policy}};
  auto s = std::make_unique<PolicySeries>();
  s->round_duration = &round_duration_->Add(l, StepBuckets());
  const char* phases[] = {"score", "select", "compact"};
  for (size_t i = 0; i < 3; ++i) {
    s->phase[i] = &phase_duration_->Add({{"policy", policy}, {"phase", phases[i]}}, StepBuckets());
  }
  s->blocks_reclaimed = &blocks_reclaimed_->Add(l);
  s->bytes_moved = &bytes_moved_->Add(l);
  s->demoted_tokens = &demoted_tokens_->Add(l);
  s->relative_position = &evicted_relative_position_->Add(l, RelativePositionBuckets());
  s->age = &evicted_age_->Add(l, AgeBuckets());
  slot = std::move(s);
  return *slot;
}

void PrometheusMetrics::OnTokens(const engine::RequestLabels& labels, int count, base::Nanos inter_token_ns) {
  if (count <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RequestSeries& s = SeriesFor(labels);
    s.generation_tokens->Increment(count);
    // 0 marks a request's first token: its latency is TTFT, not an inter-token gap.
    if (inter_token_ns > 0) s.itl->Observe(Seconds(inter_token_ns));
  }
  if (vllm_) vllm_->OnTokens(count, inter_token_ns);
}

void PrometheusMetrics::OnRequestFinished(const engine::RequestTimeline& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RequestSeries& s = SeriesFor(t.labels);
    // A finish reason added to the engine later counts as "error" until it gets a label.
    const size_t reason = static_cast<size_t>(t.finish);
    s.success[reason < s.success.size() ? reason : static_cast<size_t>(engine::FinishReason::kError)]->Increment();
    s.prompt_tokens->Increment(static_cast<double>(std::max<int64_t>(t.prompt_tokens, 0)));
    s.cached_prompt_tokens->Increment(static_cast<double>(std::max<int64_t>(t.cached_prompt_tokens, 0)));
    s.prompt_len->Observe(static_cast<double>(t.prompt_tokens));
    s.generation_len->Observe(static_cast<double>(t.generation_tokens));
    s.compression_requests->Increment();
    s.e2e->Observe(Seconds(t.finished - t.arrival));
    // A request aborted before it was scheduled or before its first token has no queue,
    // prefill or decode time; observing zeros would drag the quantiles down.
    if (t.first_scheduled > 0) s.queue_time->Observe(Seconds(t.first_scheduled - t.arrival));
    if (t.first_token > 0) {
      s.ttft->Observe(Seconds(t.first_token - t.arrival));
      s.prefill_time->Observe(Seconds(t.prefill_ns));
      s.decode_time->Observe(Seconds(t.decode_ns));
      if (t.generation_tokens > 1) {
        s.tpot->Observe(Seconds(t.decode_ns) / static_cast<double>(t.generation_tokens - 1));
      }
      // Only requests that ran say anything about what compression saved.
      if (t.compression.compression_ratio >= 1.0) s.compression_ratio->Observe(t.compression.compression_ratio);
    }
  }
  if (vllm_) vllm_->OnRequestFinished(t);
  lora_->OnRequestFinished(t);
}

void PrometheusMetrics::OnLoraState(const engine::LoraState& state) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  lora_->OnLoraState(state, now);
}

void PrometheusMetrics::OnRequestRejected(const engine::RequestLabels& labels, const std::string& reason) {
  rejected_->Add({{"tenant", std::string(Tenant(labels.tenant))}, {"reason", BoundedToken(reason)}}).Increment();
}

void PrometheusMetrics::OnStep(const engine::StepStats& step) {
  running_->Set(step.running);
  waiting_->Set(step.waiting);
  swapped_->Set(step.swapped);
  kv_usage_->Set(step.kv_usage);
  blocks_free_->Set(static_cast<double>(step.blocks_free));
  blocks_used_->Set(static_cast<double>(step.blocks_total - step.blocks_free));
  host_usage_->Set(step.host_blocks_total > 0
                       ? static_cast<double>(step.host_blocks_used) / static_cast<double>(step.host_blocks_total)
                       : 0.0);
  host_blocks_free_->Set(static_cast<double>(step.host_blocks_total - step.host_blocks_used));
  host_blocks_used_->Set(static_cast<double>(step.host_blocks_used));
  demote_blocks_free_->Set(static_cast<double>(step.demote_blocks_total - step.demote_blocks_used));
  demote_blocks_used_->Set(static_cast<double>(step.demote_blocks_used));
  live_logical_->Set(static_cast<double>(step.live_logical_tokens));
  live_physical_->Set(static_cast<double>(step.live_physical_tokens));
  if (step.k_bytes_per_token > 0) {
    kv_bytes_per_token_->Add({{"side", "key"}, {"dtype", std::string(config::Name(step.k_dtype))}})
        .Set(step.k_bytes_per_token);
    kv_bytes_per_token_->Add({{"side", "value"}, {"dtype", std::string(config::Name(step.v_dtype))}})
        .Set(step.v_bytes_per_token);
    // Demotion tiers (a low-rank tier's keys as "<dtype>_rank<r>"). A tier sharing a side's
    // dtype with the pool or another tier costs the same there, so the shared series is exact.
    for (const engine::KvTierPrecision& t : step.demote_tiers) {
      kv_bytes_per_token_->Add({{"side", "key"}, {"dtype", t.k_label}}).Set(t.k_bytes_per_token);
      kv_bytes_per_token_->Add({{"side", "value"}, {"dtype", t.v_label}}).Set(t.v_bytes_per_token);
    }
  }
  if (step.preemptions > 0) preemptions_->Increment(step.preemptions);
  if (step.spec_drafts > 0) {
    spec_drafts_->Increment(step.spec_drafts);
    spec_draft_tokens_->Increment(step.spec_draft_tokens);
    spec_accepted_tokens_->Increment(step.spec_accepted_tokens);
    for (size_t i = 0; i < step.spec_accepted_per_position.size(); ++i) {
      spec_accepted_per_pos_->Add({{"position", std::to_string(i)}})
          .Increment(static_cast<double>(step.spec_accepted_per_position[i]));
    }
  }
  if (step.ran_batch) {
    step_duration_->Observe(Seconds(step.duration_ns));
    step_tokens_->Observe(step.num_prefill_tokens + step.num_decode_tokens);
    step_seqs_->Observe(step.num_seqs);
  }

  int64_t queries = 0;
  int64_t hits = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A cumulative count that went down means the cache was reset: count from zero again.
    queries = step.prefix_queries_tokens >= last_prefix_queries_ ? step.prefix_queries_tokens - last_prefix_queries_
                                                                 : step.prefix_queries_tokens;
    hits = step.prefix_hits_tokens >= last_prefix_hits_ ? step.prefix_hits_tokens - last_prefix_hits_
                                                        : step.prefix_hits_tokens;
    last_prefix_queries_ = step.prefix_queries_tokens;
    last_prefix_hits_ = step.prefix_hits_tokens;
  }
  if (queries > 0) prefix_queries_->Increment(static_cast<double>(queries));
  if (hits > 0) prefix_hits_->Increment(static_cast<double>(hits));
  if (vllm_) vllm_->OnStep(step, queries, hits);
}

void PrometheusMetrics::OnKvTiers(const engine::KvTierStats& tiers) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_tiers_->Update(tiers);
}

void PrometheusMetrics::OnCompressionRound(const engine::CompressionRoundStats& round) {
  // Bucket the per-token observations first, outside the lock, then add them in one call
  // per histogram: a round can evict thousands of tokens.
  const auto& pos_bounds = RelativePositionBuckets();
  const auto& age_bounds = AgeBuckets();
  std::vector<double> pos_counts(pos_bounds.size() + 1, 0.0);
  std::vector<double> age_counts(age_bounds.size() + 1, 0.0);
  double pos_sum = 0.0;
  double age_sum = 0.0;
  for (double p : round.evicted_relative_positions) {
    if (std::isnan(p)) continue;  // a broken value must not poison the sum
    const double v = std::clamp(p, 0.0, 1.0);
    pos_counts[BucketIndex(pos_bounds, v)] += 1.0;
    pos_sum += v;
  }
  for (int64_t a : round.evicted_ages) {
    const double v = static_cast<double>(std::max<int64_t>(a, 0));
    age_counts[BucketIndex(age_bounds, v)] += 1.0;
    age_sum += v;
  }
  const int64_t evicted = std::max<int64_t>(round.evicted_tokens, 0);
  const int64_t evicted_prompt = std::clamp<int64_t>(round.evicted_prompt_tokens, 0, evicted);

  std::lock_guard<std::mutex> lock(mu_);
  RequestSeries& s = SeriesFor(round.labels);
  s.rounds->Increment();
  s.evicted_prompt->Increment(static_cast<double>(evicted_prompt));
  s.evicted_generated->Increment(static_cast<double>(evicted - evicted_prompt));
  PolicySeries& p = PolicySeriesFor(round.labels.policy);
  p.round_duration->Observe(Seconds(round.score_ns + round.select_ns + round.compact_ns));
  p.phase[0]->Observe(Seconds(round.score_ns));
  p.phase[1]->Observe(Seconds(round.select_ns));
  p.phase[2]->Observe(Seconds(round.compact_ns));
  p.blocks_reclaimed->Increment(static_cast<double>(std::max<int64_t>(round.blocks_reclaimed, 0)));
  p.bytes_moved->Increment(static_cast<double>(std::max<int64_t>(round.bytes_moved, 0)));
  p.demoted_tokens->Increment(static_cast<double>(std::max<int64_t>(round.demoted_tokens, 0)));
  if (!round.evicted_relative_positions.empty()) p.relative_position->ObserveMultiple(pos_counts, pos_sum);
  if (!round.evicted_ages.empty()) p.age->ObserveMultiple(age_counts, age_sum);
}

void PrometheusMetrics::OnHttpResponse(std::string_view route, int status) {
  if (status < 100 || status > 599) status = 500;
  http_requests_->Add({{"route", std::string(route)}, {"code", std::to_string(status)}}).Increment();
}

void PrometheusMetrics::OnGrpcStatus(std::string_view method, int code) {
  grpc_requests_->Add({{"method", std::string(method)}, {"code", std::string(GrpcCodeName(code))}}).Increment();
}

void PrometheusMetrics::OnRateLimit(std::string_view tenant, const RateLimitState& state,
                                    std::string_view refused_by) {
  rate_limits_->Observe(base::AsStd(Tenant(std::string(tenant))), state, refused_by);
}

std::string PrometheusMetrics::ExpositionText() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace kvserve::server
