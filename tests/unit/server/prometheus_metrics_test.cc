// PrometheusMetrics driven with synthetic engine events; every assertion reads the
// exposition text that /metrics serves, parsed back.
#include "server/metrics/prometheus_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tests/unit/server/exposition_parser.h"

namespace kvserve::server::testing {
namespace {

constexpr base::Nanos kMs = 1'000'000;

PrometheusMetricsOptions Options(bool vllm = false) {
  PrometheusMetricsOptions o;
  o.model_name = "kvs-tiny";
  o.tenants = {"alpha", "beta"};
  o.vllm_compat = vllm;
  return o;
}

Exposition Scrape(const PrometheusMetrics& m) {
  std::string error;
  auto e = Exposition::Parse(m.ExpositionText(), &error);
  EXPECT_TRUE(e.has_value()) << "malformed exposition line: " << error;
  return e.value_or(Exposition());
}

// A request that arrived at 1 s, was scheduled at 1.010 s, produced its first token at
// 1.050 s and its last (11th) at 1.250 s.
engine::RequestTimeline Timeline(const std::string& tenant, const std::string& policy,
                                 engine::FinishReason finish = engine::FinishReason::kStop) {
  engine::RequestTimeline t;
  t.labels = {tenant, policy};
  t.arrival = 1000 * kMs;
  t.first_scheduled = 1010 * kMs;
  t.first_token = 1050 * kMs;
  t.finished = 1250 * kMs;
  t.prefill_ns = 40 * kMs;
  t.decode_ns = 200 * kMs;
  t.prompt_tokens = 7;
  t.generation_tokens = 11;
  t.cached_prompt_tokens = 4;
  t.finish = finish;
  t.compression.policy = policy;
  t.compression.compression_ratio = policy == "full" ? 1.0 : 3.0;
  return t;
}

TEST(PrometheusMetricsTest, RequiredNamesHaveTheirTypes) {
  PrometheusMetrics m(Options());
  m.OnStep({});
  m.OnRequestFinished(Timeline("alpha", "full"));
  engine::CompressionRoundStats round;
  round.labels = {"alpha", "triattention"};
  m.OnCompressionRound(round);
  m.OnHttpResponse("/health", 200);
  m.OnGrpcStatus("/kvserve.v1.KvServe/Generate", 0);
  Exposition e = Scrape(m);
  const std::map<std::string, std::string> want = {
      {"kvserve_num_requests_running", "gauge"},
      {"kvserve_num_requests_waiting", "gauge"},
      {"kvserve_num_requests_swapped", "gauge"},
      {"kvserve_kv_cache_usage_ratio", "gauge"},
      {"kvserve_kv_cache_blocks", "gauge"},
      {"kvserve_kv_host_swap_usage_ratio", "gauge"},
      {"kvserve_kv_live_logical_tokens", "gauge"},
      {"kvserve_kv_live_physical_tokens", "gauge"},
      {"kvserve_prefix_cache_queries_total", "counter"},
      {"kvserve_prefix_cache_hits_total", "counter"},
      {"kvserve_num_preemptions_total", "counter"},
      {"kvserve_prompt_tokens_total", "counter"},
      {"kvserve_generation_tokens_total", "counter"},
      {"kvserve_request_success_total", "counter"},
      {"kvserve_time_to_first_token_seconds", "histogram"},
      {"kvserve_time_per_output_token_seconds", "histogram"},
      {"kvserve_inter_token_latency_seconds", "histogram"},
      {"kvserve_e2e_request_latency_seconds", "histogram"},
      {"kvserve_request_queue_time_seconds", "histogram"},
      {"kvserve_request_prefill_time_seconds", "histogram"},
      {"kvserve_request_decode_time_seconds", "histogram"},
      {"kvserve_engine_step_duration_seconds", "histogram"},
      {"kvserve_kv_compression_requests_total", "counter"},
      {"kvserve_kv_compression_rounds_total", "counter"},
      {"kvserve_kv_compression_round_duration_seconds", "histogram"},
      {"kvserve_kv_compression_phase_duration_seconds", "histogram"},
      {"kvserve_kv_evicted_tokens_total", "counter"},
      {"kvserve_kv_compression_blocks_reclaimed_total", "counter"},
      {"kvserve_kv_compaction_moved_bytes_total", "counter"},
      {"kvserve_kv_demoted_tokens_total", "counter"},
      {"kvserve_kv_demote_tier_blocks", "gauge"},
      {"kvserve_kv_compression_ratio", "histogram"},
      {"kvserve_kv_evicted_token_relative_position", "histogram"},
      {"kvserve_kv_evicted_token_age_tokens", "histogram"},
      {"kvserve_http_requests_total", "counter"},
      {"kvserve_grpc_requests_total", "counter"},
  };
  for (const auto& [name, type] : want) EXPECT_EQ(e.Type(name), type) << name;
  // Nothing but our own prefix without --metrics-compat, and every series names the model.
  for (const auto& s : e.samples()) {
    EXPECT_EQ(s.name.rfind("kvserve_", 0), 0u) << s.name;
    EXPECT_EQ(s.labels.at("model"), "kvs-tiny") << s.name;
  }
}

// The tier series follow the engine's cumulative snapshots: counters advance by the
// difference, a repeated snapshot adds nothing, latencies are observed once each.
TEST(PrometheusMetricsTest, KvTierSeriesFollowCumulativeSnapshots) {
  PrometheusMetrics m(Options());
  engine::KvTierStats t;
  t.block_size = 16;
  t.remote_enabled = true;
  t.remote_up = true;
  t.lookup_blocks[engine::KvTierStats::kRemote] = 10;
  t.hit_blocks[engine::KvTierStats::kRemote] = 4;
  t.hit_blocks[engine::KvTierStats::kHost] = 2;
  t.read_bytes[engine::KvTierStats::kRemote] = 1000;
  t.remote_rejected_blocks = 1;
  t.host_blocks = 7;
  t.host_capacity_blocks = 64;
  t.remote_load_seconds = {0.003, 0.004};
  m.OnKvTiers(t);
  t.remote_load_seconds.clear();
  m.OnKvTiers(t);  // the same totals again
  t.hit_blocks[engine::KvTierStats::kRemote] = 6;
  t.remote_up = false;
  t.remote_errors = 3;
  m.OnKvTiers(t);
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Type("kvserve_kv_tier_hit_blocks_total"), "counter");
  EXPECT_EQ(e.Type("kvserve_kv_tier_load_seconds"), "histogram");
  EXPECT_EQ(e.Sum("kvserve_kv_tier_lookup_blocks_total", {{"tier", "remote"}}), 10);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_hit_blocks_total", {{"tier", "remote"}}), 6);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_hit_tokens_total", {{"tier", "remote"}}), 96);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_hit_tokens_total", {{"tier", "host"}}), 32);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_read_bytes_total", {{"tier", "remote"}}), 1000);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_errors_total", {{"kind", "rejected"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_errors_total", {{"kind", "transport"}}), 3);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_load_seconds_count"), 2);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_remote_up"), 0);
  EXPECT_EQ(e.Sum("kvserve_kv_tier_host_blocks", {{"state", "held"}}), 7);
}

TEST(PrometheusMetricsTest, StepGaugesAndCumulativePrefixCounters) {
  PrometheusMetrics m(Options());
  engine::StepStats s;
  s.duration_ns = 3 * kMs;
  s.num_seqs = 2;
  s.num_prefill_tokens = 10;
  s.num_decode_tokens = 1;
  s.running = 2;
  s.waiting = 5;
  s.swapped = 1;
  s.preemptions = 2;
  s.blocks_total = 100;
  s.blocks_free = 25;
  s.kv_usage = 0.75;
  s.host_blocks_total = 40;
  s.host_blocks_used = 10;
  s.prefix_queries_tokens = 64;
  s.prefix_hits_tokens = 16;
  s.live_logical_tokens = 300;
  s.live_physical_tokens = 100;
  s.k_dtype = config::KvDtype::kInt4;
  s.v_dtype = config::KvDtype::kBf16;
  s.k_bytes_per_token = 288;
  s.v_bytes_per_token = 768;
  // Demotion tiers report too: an int4-values tier and a low-rank key tier (bf16 coefficients).
  const engine::KvTierPrecision tiers[] = {{"int8", "int8", 416, 416}, {"bf16_rank24", "int4", 384, 272}};
  s.demote_tiers = tiers;
  // Speculative decoding: 3 drafts of 4 guesses, 5 accepted (3 at position 0, 2 at 1).
  const int64_t per_pos[] = {3, 2, 0, 0};
  s.spec_drafts = 3;
  s.spec_draft_tokens = 12;
  s.spec_accepted_tokens = 5;
  s.spec_accepted_per_position = per_pos;
  m.OnStep(s);
  s.spec_drafts = s.spec_draft_tokens = s.spec_accepted_tokens = 0;
  s.spec_accepted_per_position = {};
  s.prefix_queries_tokens = 96;  // cumulative: +32
  s.prefix_hits_tokens = 32;     // +16
  s.running = 1;
  s.preemptions = 0;
  m.OnStep(s);
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_num_requests_running"), 1);
  EXPECT_EQ(e.Sum("kvserve_num_requests_waiting"), 5);
  EXPECT_EQ(e.Sum("kvserve_num_requests_swapped"), 1);
  EXPECT_EQ(e.Sum("kvserve_kv_cache_usage_ratio"), 0.75);
  EXPECT_EQ(e.Sum("kvserve_kv_cache_blocks", {{"state", "free"}}), 25);
  EXPECT_EQ(e.Sum("kvserve_kv_cache_blocks", {{"state", "used"}}), 75);
  EXPECT_EQ(e.Sum("kvserve_kv_host_swap_usage_ratio"), 0.25);
  EXPECT_EQ(e.Sum("kvserve_kv_host_swap_blocks", {{"state", "used"}}), 10);
  EXPECT_EQ(e.Sum("kvserve_kv_live_logical_tokens"), 300);
  EXPECT_EQ(e.Sum("kvserve_kv_live_physical_tokens"), 100);
  EXPECT_EQ(e.Sum("kvserve_kv_bytes_per_token", {{"side", "key"}, {"dtype", "int4"}}), 288);
  EXPECT_EQ(e.Sum("kvserve_kv_bytes_per_token", {{"side", "value"}, {"dtype", "bf16"}}), 768);
  EXPECT_EQ(e.Sum("kvserve_kv_bytes_per_token", {{"side", "key"}, {"dtype", "int8"}}), 416);
  EXPECT_EQ(e.Sum("kvserve_kv_bytes_per_token", {{"side", "key"}, {"dtype", "bf16_rank24"}}), 384);
  EXPECT_EQ(e.Sum("kvserve_kv_bytes_per_token", {{"side", "value"}, {"dtype", "int4"}}), 272);
  EXPECT_EQ(e.Sum("kvserve_prefix_cache_queries_total"), 96);
  EXPECT_EQ(e.Sum("kvserve_prefix_cache_hits_total"), 32);
  EXPECT_EQ(e.Sum("kvserve_num_preemptions_total"), 2);
  EXPECT_EQ(e.Sum("kvserve_spec_decode_num_drafts_total"), 3);
  EXPECT_EQ(e.Sum("kvserve_spec_decode_num_draft_tokens_total"), 12);
  EXPECT_EQ(e.Sum("kvserve_spec_decode_num_accepted_tokens_total"), 5);
  EXPECT_EQ(e.Sum("kvserve_spec_decode_num_accepted_tokens_per_pos_total", {{"position", "0"}}), 3);
  EXPECT_EQ(e.Sum("kvserve_spec_decode_num_accepted_tokens_per_pos_total", {{"position", "1"}}), 2);
  EXPECT_EQ(e.Sum("kvserve_engine_step_duration_seconds_count"), 2);
  EXPECT_NEAR(*e.Sum("kvserve_engine_step_duration_seconds_sum"), 0.006, 1e-12);
  EXPECT_EQ(e.Sum("kvserve_engine_step_tokens_sum"), 22);

  // A cache reset makes the cumulative counts start over; the counters never go down.
  s.prefix_queries_tokens = 8;
  s.prefix_hits_tokens = 0;
  m.OnStep(s);
  e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_prefix_cache_queries_total"), 104);
  EXPECT_EQ(e.Sum("kvserve_prefix_cache_hits_total"), 32);
}

TEST(PrometheusMetricsTest, StateRefreshWithoutBatchUpdatesGaugesOnly) {
  PrometheusMetrics m(Options(true));
  engine::StepStats s;
  s.running = 1;
  s.kv_usage = 0.5;
  s.num_decode_tokens = 1;
  s.num_seqs = 1;
  m.OnStep(s);
  // The only request was aborted: the engine publishes its state without running a batch.
  engine::StepStats idle;
  idle.ran_batch = false;
  idle.preemptions = 1;
  m.OnStep(idle);
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_num_requests_running"), 0);
  EXPECT_EQ(e.Sum("kvserve_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(e.Sum("vllm:num_requests_running"), 0);
  EXPECT_EQ(e.Sum("kvserve_num_preemptions_total"), 1);
  EXPECT_EQ(e.Sum("kvserve_engine_step_duration_seconds_count"), 1);
  EXPECT_EQ(e.Sum("kvserve_engine_step_sequences_count"), 1);
  EXPECT_EQ(e.Sum("vllm:iteration_tokens_total_count"), 1);
}

TEST(PrometheusMetricsTest, FinishedRequestFeedsLatencyHistogramsWithItsLabels) {
  PrometheusMetrics m(Options());
  m.OnRequestFinished(Timeline("alpha", "full"));
  m.OnRequestFinished(Timeline("beta", "triattention", engine::FinishReason::kLength));
  Exposition e = Scrape(m);
  const std::map<std::string, std::string> alpha = {{"tenant", "alpha"}, {"policy", "full"}};
  EXPECT_EQ(e.Sum("kvserve_time_to_first_token_seconds_count", alpha), 1);
  EXPECT_NEAR(*e.Sum("kvserve_time_to_first_token_seconds_sum", alpha), 0.050, 1e-9);
  EXPECT_NEAR(*e.Sum("kvserve_e2e_request_latency_seconds_sum", alpha), 0.250, 1e-9);
  EXPECT_NEAR(*e.Sum("kvserve_request_queue_time_seconds_sum", alpha), 0.010, 1e-9);
  EXPECT_NEAR(*e.Sum("kvserve_request_prefill_time_seconds_sum", alpha), 0.040, 1e-9);
  EXPECT_NEAR(*e.Sum("kvserve_request_decode_time_seconds_sum", alpha), 0.200, 1e-9);
  EXPECT_NEAR(*e.Sum("kvserve_time_per_output_token_seconds_sum", alpha), 0.020, 1e-9);  // 200 ms / 10
  // le semantics: 0.05 s lands in the 0.05 bucket, not above it.
  EXPECT_EQ(e.Sum("kvserve_time_to_first_token_seconds_bucket", {{"tenant", "alpha"}, {"le", "0.05"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_time_to_first_token_seconds_bucket", {{"tenant", "alpha"}, {"le", "0.025"}}), 0);
  EXPECT_EQ(e.Sum("kvserve_prompt_tokens_total", alpha), 7);
  EXPECT_EQ(e.Sum("kvserve_cached_prompt_tokens_total", alpha), 4);
  EXPECT_EQ(e.Sum("kvserve_request_success_total", {{"tenant", "alpha"}, {"finished_reason", "stop"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_request_success_total", {{"tenant", "alpha"}, {"finished_reason", "length"}}), 0);
  EXPECT_EQ(e.Sum("kvserve_request_success_total", {{"tenant", "beta"}, {"finished_reason", "length"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_requests_total", {{"policy", "triattention"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_ratio_sum", {{"policy", "triattention"}}), 3.0);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_ratio_sum", {{"policy", "full"}}), 1.0);
  // A policy nobody used exports no series.
  EXPECT_FALSE(e.Sum("kvserve_request_success_total", {{"policy", "h2o"}}).has_value());
}

TEST(PrometheusMetricsTest, RequestAbortedBeforeItsFirstTokenHasNoTtft) {
  PrometheusMetrics m(Options());
  engine::RequestTimeline t = Timeline("alpha", "full", engine::FinishReason::kAbort);
  t.first_scheduled = 0;
  t.first_token = 0;
  t.generation_tokens = 0;
  m.OnRequestFinished(t);
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_request_success_total", {{"finished_reason", "abort"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_e2e_request_latency_seconds_count"), 1);
  EXPECT_EQ(e.Sum("kvserve_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(e.Sum("kvserve_request_queue_time_seconds_count"), 0);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_ratio_count"), 0);
}

TEST(PrometheusMetricsTest, UnconfiguredTenantAndUnknownPolicyStayBounded) {
  PrometheusMetrics m(Options());
  for (int i = 0; i < 50; ++i) {
    m.OnTokens({"tenant-" + std::to_string(i), "policy-" + std::to_string(i)}, 1, 0);
  }
  m.OnTokens({"", ""}, 1, 0);  // the engine's unnamed default tenant
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_generation_tokens_total", {{"tenant", "other"}, {"policy", "other"}}), 50);
  EXPECT_EQ(e.Sum("kvserve_generation_tokens_total", {{"tenant", "default"}, {"policy", "full"}}), 1);
  EXPECT_EQ(e.Find("kvserve_generation_tokens_total").size(), 2u);
}

TEST(PrometheusMetricsTest, TokensCountAndInterTokenGapsSkipTheFirstToken) {
  PrometheusMetrics m(Options());
  const engine::RequestLabels l{"alpha", "full"};
  m.OnTokens(l, 1, 0);  // first token: no gap
  m.OnTokens(l, 1, 4 * kMs);
  m.OnTokens(l, 2, 6 * kMs);
  m.OnTokens(l, 0, 6 * kMs);  // nothing happened
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_generation_tokens_total", {{"tenant", "alpha"}}), 4);
  EXPECT_EQ(e.Sum("kvserve_inter_token_latency_seconds_count"), 2);
  EXPECT_NEAR(*e.Sum("kvserve_inter_token_latency_seconds_sum"), 0.010, 1e-12);
}

TEST(PrometheusMetricsTest, CompressionRoundFeedsEvictionCountersAndPositionHistograms) {
  PrometheusMetrics m(Options());
  engine::CompressionRoundStats r;
  r.labels = {"alpha", "triattention"};
  r.score_ns = 2 * kMs;
  r.select_ns = 1 * kMs;
  r.compact_ns = 3 * kMs;
  r.evicted_tokens = 5;
  r.evicted_prompt_tokens = 2;
  r.blocks_reclaimed = 3;
  r.bytes_moved = 4096;
  r.demoted_tokens = 7;
  r.evicted_relative_positions = {0.01, 0.05, 0.5, 0.99, NAN};
  r.evicted_ages = {1, 3, 100, 1000, 200000};
  m.OnCompressionRound(r);
  m.OnCompressionRound(r);
  Exposition e = Scrape(m);
  const std::map<std::string, std::string> tri = {{"policy", "triattention"}};
  EXPECT_EQ(e.Sum("kvserve_kv_compression_rounds_total", tri), 2);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total", tri), 10);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total", {{"policy", "triattention"}, {"origin", "prompt"}}), 4);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total", {{"policy", "triattention"}, {"origin", "generated"}}), 6);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_blocks_reclaimed_total", tri), 6);
  EXPECT_EQ(e.Sum("kvserve_kv_compaction_moved_bytes_total", tri), 8192);
  EXPECT_EQ(e.Sum("kvserve_kv_demoted_tokens_total", tri), 14);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_round_duration_seconds_count", tri), 2);
  EXPECT_NEAR(*e.Sum("kvserve_kv_compression_round_duration_seconds_sum", tri), 0.012, 1e-12);
  EXPECT_NEAR(*e.Sum("kvserve_kv_compression_phase_duration_seconds_sum",
                     {{"policy", "triattention"}, {"phase", "compact"}}),
              0.006, 1e-12);
  // Positions: the NaN is dropped; 0.01 and 0.05 are in le=0.05, all four in le=1.
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_relative_position_count", tri), 8);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_relative_position_bucket", {{"policy", "triattention"}, {"le", "0.05"}}),
            4);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_relative_position_bucket", {{"policy", "triattention"}, {"le", "0.5"}}),
            6);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_relative_position_bucket", {{"policy", "triattention"}, {"le", "1"}}), 8);
  EXPECT_NEAR(*e.Sum("kvserve_kv_evicted_token_relative_position_sum", tri), 2 * (0.01 + 0.05 + 0.5 + 0.99), 1e-9);
  // Ages: 1 in le=1; 3 in le=4; 200000 beyond the last bound, only in +Inf.
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_age_tokens_bucket", {{"policy", "triattention"}, {"le", "1"}}), 2);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_age_tokens_bucket", {{"policy", "triattention"}, {"le", "4"}}), 4);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_age_tokens_bucket", {{"policy", "triattention"}, {"le", "131072"}}), 8);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_age_tokens_bucket", {{"policy", "triattention"}, {"le", "+Inf"}}), 10);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_token_age_tokens_sum", tri), 2 * (1 + 3 + 100 + 1000 + 200000));
}

TEST(PrometheusMetricsTest, InconsistentRoundNeverCountsNegativeTokens) {
  PrometheusMetrics m(Options());
  engine::CompressionRoundStats r;
  r.labels = {"alpha", "snapkv"};
  r.evicted_tokens = 3;
  r.evicted_prompt_tokens = 9;  // more than evicted: clamp, do not go negative
  r.blocks_reclaimed = -4;
  m.OnCompressionRound(r);
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total", {{"origin", "prompt"}}), 3);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total", {{"origin", "generated"}}), 0);
  EXPECT_EQ(e.Sum("kvserve_kv_compression_blocks_reclaimed_total"), 0);
}

TEST(PrometheusMetricsTest, EdgeCountersByRouteMethodAndCode) {
  PrometheusMetrics m(Options());
  m.OnHttpResponse("/v1/completions", 200);
  m.OnHttpResponse("/v1/completions", 429);
  m.OnHttpResponse("/v1/completions", 429);
  m.OnHttpResponse("unmatched", 404);
  m.OnHttpResponse("unmatched", 99999);  // nonsense status: counted as 500, not as a new label
  m.OnGrpcStatus("/kvserve.v1.KvServe/Generate", 0);
  m.OnGrpcStatus("/kvserve.v1.KvServe/Generate", 8);
  m.OnGrpcStatus("/kvserve.v1.KvServe/Generate", 1234);
  m.OnRequestRejected({"alpha", "full"}, "queue_full");
  m.OnRequestRejected({"alpha", "full"}, "Some free text!");
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_http_requests_total", {{"route", "/v1/completions"}, {"code", "429"}}), 2);
  EXPECT_EQ(e.Sum("kvserve_http_requests_total", {{"route", "/v1/completions"}, {"code", "200"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_http_requests_total", {{"route", "unmatched"}, {"code", "404"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_http_requests_total", {{"code", "500"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_grpc_requests_total", {{"code", "OK"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_grpc_requests_total", {{"code", "RESOURCE_EXHAUSTED"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_grpc_requests_total", {{"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_requests_rejected_total", {{"reason", "queue_full"}}), 1);
  EXPECT_EQ(e.Sum("kvserve_requests_rejected_total", {{"reason", "other"}}), 1);
}

TEST(PrometheusMetricsTest, VllmCompatNamesOnlyWhenAsked) {
  PrometheusMetrics plain(Options(false));
  plain.OnStep({});
  const Exposition without = Scrape(plain);
  for (const auto& s : without.samples()) EXPECT_EQ(s.name.find("vllm:"), std::string::npos) << s.name;

  PrometheusMetrics m(Options(true));
  engine::StepStats s;
  s.running = 3;
  s.waiting = 7;
  s.kv_usage = 0.5;
  s.preemptions = 1;
  s.prefix_queries_tokens = 32;
  s.prefix_hits_tokens = 16;
  s.num_prefill_tokens = 12;
  const int64_t per_pos[] = {2, 1};
  s.spec_drafts = 2;
  s.spec_draft_tokens = 4;
  s.spec_accepted_tokens = 3;
  s.spec_accepted_per_position = per_pos;
  m.OnStep(s);
  m.OnTokens({"alpha", "full"}, 1, 0);
  m.OnTokens({"alpha", "full"}, 1, 20 * kMs);
  m.OnRequestFinished(Timeline("alpha", "full"));
  Exposition e = Scrape(m);
  const std::map<std::string, std::string> l = {{"model_name", "kvs-tiny"}, {"engine", "0"}};
  EXPECT_EQ(e.Sum("vllm:num_requests_running", l), 3);
  EXPECT_EQ(e.Sum("vllm:num_requests_waiting", l), 7);
  EXPECT_EQ(e.Sum("vllm:kv_cache_usage_perc", l), 0.5);  // a 0-1 fraction, as in vLLM
  EXPECT_EQ(e.Sum("vllm:gpu_cache_usage_perc", l), 0.5);
  EXPECT_EQ(e.Sum("vllm:prefix_cache_queries_total", l), 32);
  EXPECT_EQ(e.Sum("vllm:prefix_cache_hits_total", l), 16);
  EXPECT_EQ(e.Sum("vllm:num_preemptions_total", l), 1);
  EXPECT_EQ(e.Sum("vllm:spec_decode_num_drafts_total", l), 2);
  EXPECT_EQ(e.Sum("vllm:spec_decode_num_draft_tokens_total", l), 4);
  EXPECT_EQ(e.Sum("vllm:spec_decode_num_accepted_tokens_total", l), 3);
  EXPECT_EQ(e.Sum("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                  {{"model_name", "kvs-tiny"}, {"engine", "0"}, {"position", "1"}}),
            1);
  EXPECT_EQ(e.Sum("vllm:generation_tokens_total", l), 2);
  EXPECT_EQ(e.Sum("vllm:prompt_tokens_total", l), 7);
  EXPECT_EQ(e.Sum("vllm:request_success_total", {{"finished_reason", "stop"}}), 1);
  EXPECT_EQ(e.Sum("vllm:iteration_tokens_total_count", l), 1);
  EXPECT_EQ(e.Type("vllm:time_to_first_token_seconds"), "histogram");
  EXPECT_NEAR(*e.Sum("vllm:time_to_first_token_seconds_sum", l), 0.050, 1e-9);
  // vLLM's own buckets (first latency bound 0.3 s), not kvserve's.
  EXPECT_EQ(e.Sum("vllm:e2e_request_latency_seconds_bucket", {{"le", "0.3"}}), 1);
  EXPECT_EQ(e.Sum("vllm:inter_token_latency_seconds_count", l), 1);
  EXPECT_EQ(e.Sum("vllm:time_per_output_token_seconds_count", l), 1);
  EXPECT_EQ(e.Sum("vllm:request_time_per_output_token_seconds_count", l), 1);
  for (const char* name : {"vllm:request_queue_time_seconds_count", "vllm:request_prefill_time_seconds_count",
                           "vllm:request_decode_time_seconds_count", "vllm:request_inference_time_seconds_count",
                           "vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_count"}) {
    EXPECT_EQ(e.Sum(name, l), 1) << name;
  }
  // The kvserve_ names are still there.
  EXPECT_EQ(e.Sum("kvserve_num_requests_waiting"), 7);
}

TEST(PrometheusMetricsTest, ModelNameIsEscapedInTheExposition) {
  PrometheusMetricsOptions o = Options();
  o.model_name = "we\"ird\\name\n";
  PrometheusMetrics m(o);
  m.OnStep({});
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_num_requests_running", {{"model", "we\"ird\\name\n"}}), 0);
}

TEST(PrometheusMetricsTest, HooksAreSafeConcurrentlyWithScrapes) {
  PrometheusMetrics m(Options(true));
  std::atomic<bool> stop{false};
  std::thread engine([&] {
    for (int i = 0; i < 2000; ++i) {
      m.OnTokens({"alpha", "full"}, 1, kMs);
      engine::StepStats s;
      s.prefix_queries_tokens = i;
      m.OnStep(s);
      engine::CompressionRoundStats r;
      r.labels = {"beta", "h2o"};
      r.evicted_tokens = 1;
      r.evicted_relative_positions = {0.5};
      m.OnCompressionRound(r);
      m.OnRequestFinished(Timeline(i % 2 ? "alpha" : "beta", "full"));
    }
  });
  std::thread edge([&] {
    for (int i = 0; i < 2000; ++i) m.OnHttpResponse("/v1/completions", 200 + (i % 3));
  });
  int scrapes = 0;
  while (!stop) {
    Scrape(m);
    ++scrapes;
    if (scrapes >= 20) stop = true;
  }
  engine.join();
  edge.join();
  Exposition e = Scrape(m);
  EXPECT_EQ(e.Sum("kvserve_generation_tokens_total"), 2000);
  EXPECT_EQ(e.Sum("kvserve_prefix_cache_queries_total"), 1999);
  EXPECT_EQ(e.Sum("kvserve_kv_evicted_tokens_total"), 2000);
  EXPECT_EQ(e.Sum("kvserve_http_requests_total"), 2000);
  EXPECT_EQ(e.Sum("kvserve_request_success_total"), 2000);
}

}  // namespace
}  // namespace kvserve::server::testing
