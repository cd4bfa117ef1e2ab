#include "config/fields.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/absl_compat.h"
#include "config/field_builders.h"

namespace kvserve::config {
namespace {

using internal::BoolField;
using internal::DoubleField;
using internal::EnumField;
using internal::EnumListField;
using internal::EnumName;
using internal::IntField;
using internal::Lookup;
using internal::NameOf;
using internal::Names;
using internal::OptionalEnumField;
using internal::StringField;
using internal::StringListField;

constexpr std::array<EnumName<LogLevel>, 6> kLogLevels{{{LogLevel::kTrace, "trace"},
                                                        {LogLevel::kDebug, "debug"},
                                                        {LogLevel::kInfo, "info"},
                                                        {LogLevel::kWarn, "warn"},
                                                        {LogLevel::kError, "error"},
                                                        {LogLevel::kOff, "off"}}};
constexpr std::array<EnumName<EmbeddingPooling>, 2> kEmbeddingPoolings{
    {{EmbeddingPooling::kLast, "last"}, {EmbeddingPooling::kMean, "mean"}}};
constexpr std::array<EnumName<LogFormat>, 2> kLogFormats{
    {{LogFormat::kText, "text"}, {LogFormat::kJson, "json"}}};
constexpr std::array<EnumName<Backend>, 3> kBackends{
    {{Backend::kAuto, "auto"}, {Backend::kCpu, "cpu"}, {Backend::kCuda, "cuda"}}};
constexpr std::array<EnumName<KvDtype>, 6> kKvDtypes{{{KvDtype::kFp32, "fp32"},
                                                      {KvDtype::kFp16, "fp16"},
                                                      {KvDtype::kBf16, "bf16"},
                                                      {KvDtype::kFp8E4M3, "fp8_e4m3"},
                                                      {KvDtype::kInt8, "int8"},
                                                      {KvDtype::kInt4, "int4"}}};
constexpr std::array<EnumName<QueuePolicy>, 2> kQueuePolicies{
    {{QueuePolicy::kFcfs, "fcfs"}, {QueuePolicy::kPriority, "priority"}}};
constexpr std::array<EnumName<PreemptionMode>, 2> kPreemptionModes{
    {{PreemptionMode::kRecompute, "recompute"}, {PreemptionMode::kSwap, "swap"}}};
constexpr std::array<EnumName<CompressionPolicyKind>, 6> kPolicies{
    {{CompressionPolicyKind::kFull, "full"},
     {CompressionPolicyKind::kTriAttention, "triattention"},
     {CompressionPolicyKind::kStreamingLlm, "streamingllm"},
     {CompressionPolicyKind::kSnapKv, "snapkv"},
     {CompressionPolicyKind::kH2O, "h2o"},
     {CompressionPolicyKind::kAuto, "auto"}}};
constexpr std::array<EnumName<SpeculativeMethod>, 3> kSpeculativeMethods{
    {{SpeculativeMethod::kNone, "none"},
     {SpeculativeMethod::kNgram, "ngram"},
     {SpeculativeMethod::kDraft, "draft"}}};
constexpr std::array<EnumName<MetricsCompat>, 2> kMetricsCompat{
    {{MetricsCompat::kNone, "none"}, {MetricsCompat::kVllm, "vllm"}}};

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxBytes = int64_t{1} << 50;

std::vector<Field<Config>> BuildConfigFields() {
  using C = Config;
  std::vector<Field<C>> f;
  // logging
  f.push_back(EnumField<C>(
      "logging.level", "log threshold", [](C & c) -> auto& { return c.logging.level; },
      kLogLevels));
  f.push_back(EnumField<C>(
      "logging.format", "log line shape", [](C & c) -> auto& { return c.logging.format; },
      kLogFormats));
  // model
  f.push_back(StringField<C>(
      "model.path", "model directory (HF layout); empty: the bundled model",
      [](C & c) -> auto& { return c.model.path; }));
  f.push_back(StringField<C>(
      "model.served_name", "name clients use in the `model` field; empty: the directory name",
      [](C & c) -> auto& { return c.model.served_name; }));
  f.push_back(IntField<C>(
      "model.max_model_len", "context limit in tokens; 0: the model's own",
      [](C & c) -> auto& { return c.model.max_model_len; }, 0, 1 << 24));
  f.push_back(StringField<C>(
      "model.chat_template",
      "chat template: auto renders the model's own Jinja template; a family name "
      "(chatml|llama3|llama2|mistral|kvs-tiny) overrides it",
      [](C & c) -> auto& { return c.model.chat_template; }, true));
  f.push_back(StringField<C>(
      "model.reasoning_parser",
      "split reasoning into reasoning_content: auto (when the chat template uses "
      "model.reasoning_end), think (always), none",
      [](C & c) -> auto& { return c.model.reasoning_parser; }, true));
  f.push_back(StringField<C>(
      "model.reasoning_start", "marker that opens a reasoning block",
      [](C & c) -> auto& { return c.model.reasoning_start; }, true));
  f.push_back(StringField<C>(
      "model.reasoning_end", "marker that closes a reasoning block",
      [](C & c) -> auto& { return c.model.reasoning_end; }, true));
  f.push_back(StringField<C>(
      "model.tool_call_parser",
      "tool-call format of the model's output: auto (detected from the chat "
      "template), none, hermes, llama3_json, mistral",
      [](C & c) -> auto& { return c.model.tool_call_parser; }, true));
  // engine
  f.push_back(EnumField<C>(
      "engine.backend", "compute backend; auto: CUDA if a GPU is usable",
      [](C & c) -> auto& { return c.engine.backend; }, kBackends));
  f.push_back(IntField<C>(
      "engine.threads", "CPU compute threads; 0: all cores",
      [](C & c) -> auto& { return c.engine.threads; }, 0, 1024));
  f.push_back(IntField<C>(
      "engine.device",
      "CUDA device index this instance runs on, among the devices CUDA_VISIBLE_DEVICES "
      "leaves visible",
      [](C & c) -> auto& { return c.engine.device; }, 0, 63));
  f.push_back(IntField<C>(
      "engine.seed", "seed for requests that give none",
      [](C & c) -> auto& { return c.engine.seed; }, 0, std::numeric_limits<int64_t>::max()));
  // parallel
  f.push_back(IntField<C>(
      "parallel.tensor", "tensor-parallel ranks per pipeline stage (mpirun -np tensor x pipeline)",
      [](C & c) -> auto& { return c.parallel.tensor; }, 1, 64));
  f.push_back(IntField<C>(
      "parallel.pipeline",
      "pipeline stages, contiguous layer ranges (mpirun -np tensor x pipeline)",
      [](C & c) -> auto& { return c.parallel.pipeline; }, 1, 64));
  // cache
  f.push_back(IntField<C>(
      "cache.block_size", "tokens per KV block", [](C & c) -> auto& { return c.cache.block_size; },
      8, 128, false, true));
  f.push_back(IntField<C>(
      "cache.kv_bytes", "KV pool budget in bytes on the CPU backend",
      [](C & c) -> auto& { return c.cache.kv_bytes; }, 1 << 16, kMaxBytes, true));
  f.push_back(DoubleField<C>(
      "cache.gpu_memory_utilization",
      "CUDA: fraction of the device's memory this instance may use (weights, "
      "activations and KV pool, as in vLLM)",
      [](C & c) -> auto& { return c.cache.gpu_memory_utilization; }, 0.0, 1.0, true));
  f.push_back(EnumField<C>(
      "cache.kv_dtype", "storage precision of K and V (shorthand for both)",
      [](C & c) -> auto& { return c.cache.kv_dtype; }, kKvDtypes));
  f.push_back(OptionalEnumField<C>(
      "cache.k_dtype", "storage precision of K; auto: cache.kv_dtype",
      [](C & c) -> auto& { return c.cache.k_dtype; }, kKvDtypes));
  f.push_back(OptionalEnumField<C>(
      "cache.v_dtype", "storage precision of V; auto: cache.kv_dtype",
      [](C & c) -> auto& { return c.cache.v_dtype; }, kKvDtypes));
  f.push_back(IntField<C>(
      "cache.kv_int4_group",
      "int4 values: elements per (scale, min) group along head_dim (the last "
      "group of a row may be shorter)",
      [](C & c) -> auto& { return c.cache.kv_int4_group; }, 8, 256, false, true));
  f.push_back(IntField<C>(
      "cache.demote_kv_bytes",
      "bytes of cache.kv_bytes given to the demotion tier pools (one per "
      "cache.demote_dtypes entry, split evenly): kv_compression.demote moves "
      "low-importance tokens there; 0: no demotion",
      [](C & c) -> auto& { return c.cache.demote_kv_bytes; }, 0, kMaxBytes, true));
  f.push_back(EnumListField<C>(
      "cache.demote_dtypes",
      "demotion tiers' precision (K and V), highest first, each below the pool's",
      [](C & c) -> auto& { return c.cache.demote_dtypes; }, kKvDtypes));
  f.push_back(IntField<C>(
      "cache.lowrank_key_rank",
      "low-rank keys: a demotion tier (\"lowrank\" in kv_compression.demote) that "
      "stores each key as this many coefficients on the calibrated post-RoPE key "
      "basis (below head_dim; needs cache.demote_kv_bytes > 0); 0: none",
      [](C & c) -> auto& { return c.cache.lowrank_key_rank; }, 0, 1024));
  f.push_back(EnumField<C>(
      "cache.lowrank_k_dtype", "low-rank tier: precision of the key coefficients",
      [](C & c) -> auto& { return c.cache.lowrank_k_dtype; }, kKvDtypes));
  f.push_back(BoolField<C>(
      "cache.lowrank_query_aware",
      "low-rank tier: the query-aware basis (least expected attention-score error) "
      "instead of plain key PCA",
      [](C & c) -> auto& { return c.cache.lowrank_query_aware; }));
  f.push_back(EnumField<C>(
      "cache.lowrank_v_dtype", "low-rank tier: precision of the values (full head_dim)",
      [](C & c) -> auto& { return c.cache.lowrank_v_dtype; }, kKvDtypes));
  f.push_back(BoolField<C>(
      "cache.enable_prefix_caching", "reuse KV blocks of shared prompt prefixes",
      [](C & c) -> auto& { return c.cache.enable_prefix_caching; }));
  f.push_back(BoolField<C>(
      "cache.layer_groups",
      "hybrid models (global + sliding-window layers): window layers' KV in tables of "
      "their own, released past the window; turns swap and the host/remote prefix tiers off "
      "for such a model (CPU backend). false: one table for every layer",
      [](C & c) -> auto& { return c.cache.layer_groups; }));
  f.push_back(IntField<C>(
      "cache.host_swap_bytes", "host swap tier size in bytes; 0 disables swap",
      [](C & c) -> auto& { return c.cache.host_swap_bytes; }, 0, kMaxBytes, true));
  f.push_back(IntField<C>(
      "cache.host_cache_bytes",
      "host prefix tier: full prefix blocks evicted from the KV pool are kept here "
      "and loaded back on a hit; shares one host pool with swap (swap has priority); "
      "0 disables it, unless cache.remote_kv_url is set: then it is sized as cache.kv_bytes",
      [](C & c) -> auto& { return c.cache.host_cache_bytes; }, 0, kMaxBytes, true));
  f.push_back(StringField<C>(
      "cache.remote_kv_url",
      "remote KV tier shared by replicas, redis://HOST[:PORT][/DB]; empty: off",
      [](C & c) -> auto& { return c.cache.remote_kv_url; }));
  f.push_back(BoolField<C>(
      "cache.remote_kv_write_back",
      "true: write blocks to the remote tier when the host tier evicts them; "
      "false: write-through when a block is committed",
      [](C & c) -> auto& { return c.cache.remote_kv_write_back; }));
  f.push_back(DoubleField<C>(
      "cache.remote_kv_timeout_seconds",
      "remote KV tier connect and per-command timeout in seconds",
      [](C & c) -> auto& { return c.cache.remote_kv_timeout_seconds; }, 0.001, 60.0));
  f.push_back(IntField<C>(
      "cache.remote_kv_ttl_seconds",
      "expiry of blocks written to the remote tier in seconds; 0: none",
      [](C & c) -> auto& { return c.cache.remote_kv_ttl_seconds; }, 0, 365ll * 86400));
  // scheduler
  f.push_back(IntField<C>(
      "scheduler.max_num_seqs", "sequences running at once",
      [](C & c) -> auto& { return c.scheduler.max_num_seqs; }, 1, 65536));
  f.push_back(IntField<C>(
      "scheduler.max_num_batched_tokens", "token budget of one step",
      [](C & c) -> auto& { return c.scheduler.max_num_batched_tokens; }, 1, 1 << 20));
  f.push_back(BoolField<C>(
      "scheduler.enable_chunked_prefill", "split long prompts across steps",
      [](C & c) -> auto& { return c.scheduler.enable_chunked_prefill; }));
  f.push_back(EnumField<C>(
      "scheduler.queue_policy", "waiting-queue order",
      [](C & c) -> auto& { return c.scheduler.queue_policy; }, kQueuePolicies));
  f.push_back(EnumField<C>(
      "scheduler.preemption_mode", "what happens to a preempted sequence's KV",
      [](C & c) -> auto& { return c.scheduler.preemption_mode; }, kPreemptionModes));
  f.push_back(IntField<C>(
      "scheduler.max_waiting", "queued requests before Submit is refused (429)",
      [](C & c) -> auto& { return c.scheduler.max_waiting; }, 1, kMaxInt));
  // compression
  f.push_back(EnumField<C>(
      "compression.default_policy", "policy for requests and tenants that name none",
      [](C & c) -> auto& { return c.compression.default_policy; }, kPolicies));
  f.push_back(IntField<C>(
      "compression.budget", "B: KV tokens kept per sequence after a round",
      [](C & c) -> auto& { return c.compression.budget; }, 8, 1 << 24));
  f.push_back(IntField<C>(
      "compression.divide_length",
      "beta: slack tokens before a round triggers (0: min(128, budget / 4))",
      [](C & c) -> auto& { return c.compression.divide_length; }, 0, 1 << 20));
  f.push_back(BoolField<C>(
      "compression.protect_prompt", "never evict prompt tokens",
      [](C & c) -> auto& { return c.compression.protect_prompt; }));
  f.push_back(IntField<C>(
      "compression.window",
      "recent tokens always kept / observation window (-1: the policy's default)",
      [](C & c) -> auto& { return c.compression.window; }, -1, 1 << 20));
  f.push_back(IntField<C>(
      "compression.sinks", "attention-sink tokens kept by streamingllm / triattention",
      [](C & c) -> auto& { return c.compression.sinks; }, 0, 1 << 20));
  f.push_back(DoubleField<C>(
      "compression.auto_high_watermark", "auto: pool usage above which compression switches on",
      [](C & c) -> auto& { return c.compression.auto_high_watermark; }, 0.0, 1.0, true));
  f.push_back(DoubleField<C>(
      "compression.auto_low_watermark", "auto: pool usage below which compression switches off",
      [](C & c) -> auto& { return c.compression.auto_low_watermark; }, 0.0, 1.0));
  f.push_back(IntField<C>(
      "compression.max_prefill_chunk",
      "prefill chunk cap of compressing requests: their KV stays under "
      "budget + divide_length + this",
      [](C & c) -> auto& { return c.compression.max_prefill_chunk; }, 1, 1 << 20));
  // speculative decoding
  f.push_back(EnumField<C>(
      "speculative.method",
      "speculative decoding default: none, ngram (prompt lookup) or draft "
      "(speculative.draft_model); "
      "CPU backend",
      [](C & c) -> auto& { return c.speculative.method; }, kSpeculativeMethods));
  f.push_back(IntField<C>(
      "speculative.num_tokens", "draft tokens proposed per step (verify rows: 1 + this)",
      [](C & c) -> auto& { return c.speculative.num_tokens; }, 1, 16));
  f.push_back(IntField<C>(
      "speculative.ngram_min", "ngram: shortest suffix n-gram matched",
      [](C & c) -> auto& { return c.speculative.ngram_min; }, 1, 64));
  f.push_back(IntField<C>(
      "speculative.ngram_max", "ngram: longest suffix n-gram matched (tried first)",
      [](C & c) -> auto& { return c.speculative.ngram_max; }, 1, 64));
  f.push_back(DoubleField<C>(
      "speculative.min_acceptance",
      "a sequence whose recent draft acceptance falls below this stops drafting "
      "for a while (0: never)",
      [](C & c) -> auto& { return c.speculative.min_acceptance; }, 0.0, 1.0));
  // ---- lora (docs/lora.md)
  f.push_back(BoolField<C>(
      "lora.enabled", "serve LoRA adapters even when lora.adapters is empty (admin loading)",
      [](C & c) -> auto& { return c.lora.enabled; }));
  f.push_back(IntField<C>(
      "lora.max_loras", "distinct LoRA adapters in one step (the scheduler's bound)",
      [](C & c) -> auto& { return c.lora.max_loras; }, 1, 64));
  f.push_back(IntField<C>(
      "lora.max_lora_rank", "largest rank of any adapted module; larger adapters are refused",
      [](C & c) -> auto& { return c.lora.max_lora_rank; }, 1, 512));
  f.push_back(IntField<C>(
      "lora.max_cpu_loras",
      "adapters held in host memory (LRU); 0: max(lora.max_loras, number of lora.adapters)",
      [](C & c) -> auto& { return c.lora.max_cpu_loras; }, 0, 1 << 16));
  f.push_back(StringListField<C>(
      "lora.adapters", "LoRA adapters served at start, as name=path (PEFT directories)",
      [](C & c) -> auto& { return c.lora.adapters; }, false));
  f.push_back(StringField<C>(
      "lora.admin_api_key",
      "Bearer key that the adapter load/unload endpoints require; empty: open servers only",
      [](C & c) -> auto& { return c.lora.admin_api_key; }, false, true));
  f.push_back(StringField<C>(
      "speculative.draft_model",
      "draft model directory (a smaller model with the target's tokenizer); empty: none, and "
      "method draft is refused",
      [](C & c) -> auto& { return c.speculative.draft_model; }));
  f.push_back(IntField<C>(
      "speculative.draft_kv_bytes",
      "the draft model's own KV pool in bytes, taken out of cache.kv_bytes (CPU backend)",
      [](C & c) -> auto& { return c.speculative.draft_kv_bytes; }, 1 << 16, kMaxBytes, true));
  f.push_back(DoubleField<C>(
      "speculative.row_cost",
      "adaptive draft length: a verify row's cost, in decode steps' fixed parts; 0: measured",
      [](C & c) -> auto& { return c.speculative.row_cost; }, 0.0, 4.0));
  f.push_back(DoubleField<C>(
      "speculative.draft_guess_cost",
      "adaptive draft length: a draft-model forward's cost, in the target's; 0: measured",
      [](C & c) -> auto& { return c.speculative.draft_guess_cost; }, 0.0, 16.0));
  f.push_back(StringField<C>(
      "compression.stats_path",
      "TriAttention statistics file; empty: <model>/triattention_stats.bin (beside a GGUF file)",
      [](C & c) -> auto& { return c.compression.stats_path; }));
  f.push_back(StringField<C>(
      "compression.key_basis_path",
      "low-rank key basis file (written by `kvserve calibrate`); empty: "
      "<model>/key_basis.bin (beside a GGUF file)",
      [](C & c) -> auto& { return c.compression.key_basis_path; }));
  // server
  f.push_back(StringField<C>(
      "server.host", "listen address", [](C & c) -> auto& { return c.server.host; }, true));
  f.push_back(IntField<C>(
      "server.http_port", "OpenAI HTTP port; 0 picks a free one",
      [](C & c) -> auto& { return c.server.http_port; }, 0, 65535));
  f.push_back(IntField<C>(
      "server.grpc_port", "gRPC port; 0 picks a free one",
      [](C & c) -> auto& { return c.server.grpc_port; }, 0, 65535));
  f.push_back(IntField<C>(
      "server.max_body_bytes", "largest accepted request body (413 beyond)",
      [](C & c) -> auto& { return c.server.max_body_bytes; }, 1024, 1ll << 32, true));
  f.push_back(DoubleField<C>(
      "server.drain_timeout_seconds",
      "on SIGTERM, time for in-flight requests before they are aborted",
      [](C & c) -> auto& { return c.server.drain_timeout_seconds; }, 0.0, 86400.0));
  f.push_back(IntField<C>(
      "server.http_max_connections", "concurrent HTTP connections served",
      [](C & c) -> auto& { return c.server.http_max_connections; }, 1, 65536));
  f.push_back(IntField<C>(
      "server.max_prompts_per_request", "completions: prompts in one request",
      [](C & c) -> auto& { return c.server.limits.max_prompts; }, 1, 65536));
  f.push_back(IntField<C>(
      "server.max_messages_per_chat", "chat: messages in one request",
      [](C & c) -> auto& { return c.server.limits.max_messages; }, 1, 1 << 20));
  f.push_back(EnumField<C>(
      "server.embedding_pooling", "/v1/embeddings: last token or mean of the prompt",
      [](C & c) -> auto& { return c.server.embedding.pooling; }, kEmbeddingPoolings));
  f.push_back(BoolField<C>(
      "server.embedding_normalize", "/v1/embeddings: L2-normalise the vectors",
      [](C & c) -> auto& { return c.server.embedding.normalize; }));
  f.push_back(IntField<C>(
      "server.max_n", "samples per prompt (n)",
      [](C & c) -> auto& { return c.server.limits.max_n; }, 1, 128));
  f.push_back(IntField<C>(
      "server.max_stop_strings", "stop strings in one request",
      [](C & c) -> auto& { return c.server.limits.max_stop_strings; }, 0, 4096));
  f.push_back(IntField<C>(
      "server.max_stop_string_bytes", "length of one stop string",
      [](C & c) -> auto& { return c.server.limits.max_stop_string_bytes; }, 1, 65536));
  f.push_back(IntField<C>(
      "server.max_generated_tokens_per_request", "prompts x n x max_tokens of one request",
      [](C & c) -> auto& { return c.server.limits.max_generated_tokens; }, 1, int64_t{1} << 40));
  f.push_back(IntField<C>(
      "server.max_logprobs", "logprobs / top_logprobs alternatives",
      [](C & c) -> auto& { return c.server.limits.max_logprobs; }, 0, 20));
  f.push_back(IntField<C>(
      "server.max_logit_bias", "logit_bias entries",
      [](C & c) -> auto& { return c.server.limits.max_logit_bias; }, 0, 300));
  f.push_back(DoubleField<C>(
      "server.http_request_timeout_seconds",
      "a connection that has not sent a whole request in this long is closed "
      "(0.5 s while all connection threads are busy)",
      [](C & c) -> auto& { return c.server.http_request_timeout_seconds; }, 0.1, 3600.0));
  f.push_back(IntField<C>(
      "server.responses_store_max_entries",
      "/v1/responses kept in memory for GET and previous_response_id (oldest evicted); 0: none",
      [](C & c) -> auto& { return c.server.responses_store_max_entries; }, 0, 1000000));
  f.push_back(DoubleField<C>(
      "server.responses_store_ttl_seconds", "a stored /v1/responses response is dropped after this",
      [](C & c) -> auto& { return c.server.responses_store_ttl_seconds; }, 1.0, 604800.0));
  f.push_back(StringField<C>(
      "server.tls_cert_path", "PEM certificate chain: HTTPS and gRPC over TLS; empty: plain",
      [](C & c) -> auto& { return c.server.tls_cert_path; }));
  f.push_back(StringField<C>(
      "server.tls_key_path", "PEM private key of tls_cert_path",
      [](C & c) -> auto& { return c.server.tls_key_path; }));
  f.push_back(StringField<C>(
      "server.tls_client_ca_path",
      "PEM CA: HTTPS and gRPC clients must present a certificate it signed (mutual TLS)",
      [](C & c) -> auto& { return c.server.tls_client_ca_path; }));
  f.push_back(EnumField<C>(
      "server.metrics_compat", "also export metrics under another engine's names",
      [](C & c) -> auto& { return c.server.metrics_compat; }, kMetricsCompat));
  f.push_back(StringField<C>(
      "server.metrics_api_key",
      "Bearer key that GET /metrics requires (tenant keys do not open it); empty: open",
      [](C & c) -> auto& { return c.server.metrics_api_key; }, false, true));
  return f;
}

std::vector<Field<TenantConfig>> BuildTenantFields() {
  using T = TenantConfig;
  std::vector<Field<T>> f;
  f.push_back(StringField<T>(
      "name", "tenant name (metrics label)", [](T & t) -> auto& { return t.name; }, true));
  f.push_back(StringListField<T>(
      "api_keys", "Bearer keys that map to this tenant", [](T & t) -> auto& { return t.api_keys; },
      true));
  f.push_back(StringField<T>(
      "api_keys_file", "file with more keys, one per line (a mounted secret)",
      [](T & t) -> auto& { return t.api_keys_file; }));
  f.push_back(StringField<T>(
      "api_keys_env",
      "environment variable with more keys, comma/space/newline separated (a secret)",
      [](T & t) -> auto& { return t.api_keys_env; }));
  f.push_back(DoubleField<T>(
      "weight", "fair share of the token budget under contention",
      [](T & t) -> auto& { return t.weight; }, 0.0, 1e6, true));
  f.push_back(IntField<T>(
      "priority", "default request priority (lower first)",
      [](T & t) -> auto& { return t.priority; }, -1000000, 1000000));
  f.push_back(IntField<T>(
      "max_running", "running sequences; 0: unlimited",
      [](T & t) -> auto& { return t.max_running; }, 0, kMaxInt));
  f.push_back(IntField<T>(
      "max_queued", "queued requests; 0: unlimited", [](T & t) -> auto& { return t.max_queued; }, 0,
      kMaxInt));
  f.push_back(IntField<T>(
      "requests_per_minute",
      "requests admitted per minute (token bucket, bursts up to the limit); 0: unlimited",
      [](T & t) -> auto& { return t.requests_per_minute; }, 0, kMaxInt));
  f.push_back(IntField<T>(
      "tokens_per_minute",
      "prompt tokens at admission plus output tokens at the end, per minute; 0: unlimited",
      [](T & t) -> auto& { return t.tokens_per_minute; }, 0, kMaxInt));
  f.push_back(EnumField<T>(
      "default_policy", "compression policy when a request names none",
      [](T & t) -> auto& { return t.default_policy; }, kPolicies));
  f.push_back(IntField<T>(
      "budget", "KV tokens kept per sequence for requests naming none; 0: compression.budget",
      [](T & t) -> auto& { return t.budget; }, 0, 1 << 24));
  f.push_back(IntField<T>(
      "window",
      "recent window / observation window for requests naming none; -1: compression.window",
      [](T & t) -> auto& { return t.window; }, -1, 1 << 20));
  f.push_back(OptionalEnumField<T>(
      "k_dtype", "keys' KV precision for requests naming none; auto: the pool's (cache.k_dtype)",
      [](T & t) -> auto& { return t.k_dtype; }, kKvDtypes));
  f.push_back(OptionalEnumField<T>(
      "v_dtype", "values' KV precision for requests naming none; auto: the pool's (cache.v_dtype)",
      [](T & t) -> auto& { return t.v_dtype; }, kKvDtypes));
  f.push_back(EnumListField<T>(
      "allowed_policies", "policies requests may ask for; empty: all",
      [](T & t) -> auto& { return t.allowed_policies; }, kPolicies));
  f.push_back(EnumListField<T>(
      "allowed_kv_dtypes", "KV precisions requests may ask for; empty: all",
      [](T & t) -> auto& { return t.allowed_kv_dtypes; }, kKvDtypes));
  f.push_back(StringListField<T>(
      "adapters", "LoRA adapters its requests may select by `model`; empty: all",
      [](T & t) -> auto& { return t.adapters; }, false));
  f.push_back(StringField<T>(
      "prefix_cache_group", "tenants in one group share prefix-cache blocks; empty: isolated",
      [](T & t) -> auto& { return t.prefix_cache_group; }));
  return f;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

const std::vector<Field<Config>>& ConfigFields() {
  static const auto* fields = new std::vector<Field<Config>>(BuildConfigFields());
  return *fields;
}

const std::vector<Field<TenantConfig>>& TenantFields() {
  static const auto* fields = new std::vector<Field<TenantConfig>>(BuildTenantFields());
  return *fields;
}

std::string EnvNameFor(const std::string& path) {
  std::string out = "KVSERVE_";
  for (char c : path)
    out += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

absl::StatusOr<Value> ParseText(FieldKind kind, const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(base::AsAbsl(text)));
  switch (kind) {
    case FieldKind::kBool: {
      std::string l = absl::AsciiStrToLower(base::AsAbsl(t));
      if (l == "true" || l == "1" || l == "yes" || l == "on") return Value{true};
      if (l == "false" || l == "0" || l == "no" || l == "off") return Value{false};
      return absl::InvalidArgumentError("must be true or false");
    }
    case FieldKind::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(base::AsAbsl(t), &v))
        return absl::InvalidArgumentError("must be an integer");
      return Value{v};
    }
    case FieldKind::kBytes: {
      // digits followed by an optional unit: K/M/G/T (powers of 1024), with or without "iB"/"B".
      size_t i = 0;
      while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
      int64_t base_v;
      if (i == 0 || !absl::SimpleAtoi(base::AsAbsl(t.substr(0, i)), &base_v)) {
        return absl::InvalidArgumentError("must be a byte count such as 268435456, 256MiB or 2GiB");
      }
      std::string unit = absl::AsciiStrToLower(base::AsAbsl(t.substr(i)));
      int shift = 0;
      if (unit.empty() || unit == "b")
        shift = 0;
      else if (unit == "k" || unit == "kib" || unit == "kb")
        shift = 10;
      else if (unit == "m" || unit == "mib" || unit == "mb")
        shift = 20;
      else if (unit == "g" || unit == "gib" || unit == "gb")
        shift = 30;
      else if (unit == "t" || unit == "tib" || unit == "tb")
        shift = 40;
      else
        return absl::InvalidArgumentError("must be a byte count such as 268435456, 256MiB or 2GiB");
      if (base_v > (std::numeric_limits<int64_t>::max() >> shift)) {
        return absl::InvalidArgumentError("byte count overflows");
      }
      return Value{base_v << shift};
    }
    case FieldKind::kDouble: {
      double v;
      if (!absl::SimpleAtod(base::AsAbsl(t), &v))
        return absl::InvalidArgumentError("must be a number");
      return Value{v};
    }
    case FieldKind::kString:
    case FieldKind::kEnum:
      return Value{t};
    case FieldKind::kEnumList:
    case FieldKind::kStringList: {
      std::vector<std::string> out;
      if (!t.empty()) {
        for (absl::string_view part : absl::StrSplit(base::AsAbsl(t), ',')) {
          out.emplace_back(absl::StripAsciiWhitespace(part));
        }
      }
      return Value{out};
    }
  }
  return absl::InternalError("unknown field kind");
}

std::string FormatValue(const Value& v) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return absl::StrCat(i); }
    std::string operator()(double d) const { return absl::StrCat(d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<std::string>& l) const {
      return absl::StrJoin(l, ",");
    }
  };
  return std::visit(Visitor{}, v);
}

std::string_view Name(LogLevel v) { return NameOf(kLogLevels, v); }
std::string_view Name(LogFormat v) { return NameOf(kLogFormats, v); }
std::string_view Name(Backend v) { return NameOf(kBackends, v); }
std::string_view Name(KvDtype v) { return NameOf(kKvDtypes, v); }
std::string_view Name(QueuePolicy v) { return NameOf(kQueuePolicies, v); }
std::string_view Name(PreemptionMode v) { return NameOf(kPreemptionModes, v); }
std::string_view Name(CompressionPolicyKind v) { return NameOf(kPolicies, v); }
std::string_view Name(MetricsCompat v) { return NameOf(kMetricsCompat, v); }
std::optional<CompressionPolicyKind> ParseCompressionPolicy(std::string_view name) {
  return Lookup(kPolicies, name);
}
std::optional<KvDtype> ParseKvDtype(std::string_view name) { return Lookup(kKvDtypes, name); }

std::optional<std::string> DidYouMean(const std::string& key,
                                      const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = EditDistance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A plausible typo: at most a third of the key's length (and at least 1..3 edits).
  size_t limit = std::max<size_t>(2, std::min<size_t>(key.size() / 3, 6));
  if (best && best_d <= limit) return best;
  return std::nullopt;
}

}  // namespace kvserve::config
