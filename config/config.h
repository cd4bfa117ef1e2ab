// The one typed configuration of kvserve. Plain structs with defaults; loading,
// overriding and validation live in config_loader.h, the field table in fields.h.
//
// Precedence: CLI flags > KVSERVE_* environment > JSON file > defaults.
// Nothing outside config/ reads the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::config {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat { kText, kJson };
enum class Backend { kAuto, kCpu, kCuda };
// KV storage precision (docs/kv_precision.md). kInt4 is asymmetric 4-bit with per-group
// (value, min) scales: per channel per block for keys, per token per head_dim group for values.
enum class KvDtype { kFp32, kFp16, kBf16, kFp8E4M3, kInt8, kInt4 };
enum class QueuePolicy { kFcfs, kPriority };
enum class PreemptionMode { kRecompute, kSwap };
enum class CompressionPolicyKind { kFull, kTriAttention, kStreamingLlm, kSnapKv, kH2O, kAuto };
enum class MetricsCompat { kNone, kVllm };
enum class SpeculativeMethod { kNone, kNgram, kDraft };

struct LoggingConfig {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
};

struct ModelConfig {
  std::string path;         // empty: the bundled model (models/kvs-tiny next to the binary's tree)
  std::string served_name;  // empty: the model directory's name
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  std::string chat_template = "auto";  // auto: render tokenizer_config.json's own Jinja template
  std::string reasoning_parser = "auto";  // auto|none|think (chat/chat_formats.h)
  std::string reasoning_start = "<think>";
  std::string reasoning_end = "</think>";
  std::string tool_call_parser = "auto";  // auto|none|hermes|llama3_json|mistral
};

struct EngineConfig {
  Backend backend = Backend::kAuto;
  int threads = 0;     // CPU compute threads; 0: all cores
  int device = 0;      // CUDA device index this instance runs on (after CUDA_VISIBLE_DEVICES)
  uint64_t seed = 0;   // default seed for requests that do not give one
};

// One model over several ranks (mpirun -np N with N = tensor x pipeline; docs/parallelism.md).
struct ParallelConfig {
  int tensor = 1;    // tensor-parallel ranks per pipeline stage
  int pipeline = 1;  // pipeline stages (contiguous layer ranges)
  int world() const { return tensor * pipeline; }
};

struct CacheConfig {
  int block_size = 16;                          // tokens per KV block
  uint64_t kv_bytes = 256ull << 20;             // KV pool budget (CPU backend)
  double gpu_memory_utilization = 0.90;         // CUDA: share of the device this instance may use
  KvDtype kv_dtype = KvDtype::kFp32;           // shorthand: K and V (unless k_dtype/v_dtype say)
  std::optional<KvDtype> k_dtype;               // keys' precision; unset: kv_dtype
  std::optional<KvDtype> v_dtype;               // values' precision; unset: kv_dtype
  int kv_int4_group = 32;                       // int4 values: elements per scale group along head_dim
  // Demotion tiers (importance-aware mixed precision, issue 18): this many bytes of kv_bytes
  // go to one pool per demote_dtypes entry (split evenly), where compression rounds put the
  // tokens a request's kv_compression.demote asks for. 0: no tiers (demote is refused).
  uint64_t demote_kv_bytes = 0;
  std::vector<KvDtype> demote_dtypes = {KvDtype::kInt8, KvDtype::kInt4};  // descending precision
  // Low-rank keys (issue 18): when > 0, one more demotion tier, after the demote_dtypes ones
  // and named "lowrank" in kv_compression.demote, stores each key as this many coefficients
  // on the model's post-RoPE key PCA basis (compression.key_basis_path), in lowrank_k_dtype,
  // and its values in lowrank_v_dtype. Must be below head_dim. 0: no low-rank tier.
  int lowrank_key_rank = 0;
  KvDtype lowrank_k_dtype = KvDtype::kBf16;
  KvDtype lowrank_v_dtype = KvDtype::kInt8;
  // The low-rank basis: true, the query-aware one (least expected score error, key_basis.h);
  // false, plain PCA of the keys (least key reconstruction error).
  bool lowrank_query_aware = true;
  bool enable_prefix_caching = true;
  // Hybrid models (global and sliding-window layers: Gemma 2/3, gpt-oss): window layers keep
  // their KV in tables of their own that stop growing past the window (cache/layer_groups.h).
  // Prefix caching, swap and the host/remote tiers are then off for such a model (CPU backend).
  bool layer_groups = true;
  uint64_t host_swap_bytes = 256ull << 20;      // host swap tier; 0 disables swapping
  uint64_t host_cache_bytes = 0;                // host prefix tier (evicted prefix blocks); 0: off
  // Remote KV tier shared by replicas (redis://HOST[:PORT][/DB]); empty: off.
  std::string remote_kv_url;
  bool remote_kv_write_back = false;            // false: write-through on commit
  double remote_kv_timeout_seconds = 0.05;      // connect and per-command timeout
  int64_t remote_kv_ttl_seconds = 3600;         // expiry of written blocks; 0: none
};

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  bool enable_chunked_prefill = true;
  QueuePolicy queue_policy = QueuePolicy::kFcfs;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  int max_waiting = 4096;  // global bound on queued requests; beyond it Submit is refused
};

// Speculative decoding (docs/speculative.md): the server default; a request's `speculative`
// object overrides it. CPU backend only for now.
struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int num_tokens = 4;   // draft tokens proposed per step (k); verify rows are 1 + k
  int ngram_min = 2;    // shortest suffix n-gram the n-gram proposer matches
  int ngram_max = 4;    // longest (tried first)
  // Adaptive switch-off: a sequence whose recent acceptance rate falls below this stops
  // drafting for a while (backing off), so text that does not repeat itself pays nothing.
  double min_acceptance = 0.3;
  // Draft-model speculation (method draft): a smaller model directory sharing the target's
  // tokenizer, loaded at start-up (CPU backend), with a KV pool of its own of this many bytes.
  std::string draft_model;
  uint64_t draft_kv_bytes = 32ull << 20;
  // The adaptive draft length's costs (speculative/step_cost.h), in units of a target decode
  // step's fixed part: a verify row, and one draft-model forward. 0: measured at start-up
  // (CPU backend, when the server speculates by default or loads a draft model).
  double row_cost = 0.0;
  double draft_guess_cost = 0.0;
};

struct CompressionConfig {
  CompressionPolicyKind default_policy = CompressionPolicyKind::kFull;
  int budget = 2048;         // B: tokens kept per sequence after a round
  int divide_length = 0;     // beta: slack before a round triggers; 0: min(128, budget / 4)
  bool protect_prompt = true;
  int window = -1;           // recent window (triattention, unprotected prompt: 128) / snapkv
                             // observation window (64); -1: the policy's default
  int sinks = 4;             // attention sinks kept by streamingllm / triattention
  double auto_high_watermark = 0.90;
  double auto_low_watermark = 0.75;
  std::string stats_path;    // TriAttention statistics; empty: <model dir>/triattention_stats.bin
  std::string key_basis_path;  // low-rank key basis (cache.lowrank_key_rank); empty: <model dir>/key_basis.bin
  int max_prefill_chunk = 256;  // prefill chunk cap of compressing requests (footprint bound)
};

// Per-request limits of the front ends, each checked before any work is queued (a 400
// naming the field beyond it).
struct RequestLimits {
  int max_prompts = 128;             // completions: prompts in one request
  int max_messages = 1024;           // chat: messages in one request
  int max_n = 128;                   // samples per prompt
  int max_stop_strings = 64;
  int max_stop_string_bytes = 256;
  int64_t max_generated_tokens = 1 << 20;  // prompts × n × max_tokens
  int max_logprobs = 20;             // top_logprobs / logprobs alternatives (the engine's cap)
  int max_logit_bias = 300;          // logit_bias entries (OpenAI's cap)
};

// /v1/embeddings (server/openai/embeddings_api.h): how the prompt's final hidden states are pooled.
enum class EmbeddingPooling { kLast, kMean };
struct EmbeddingConfig {
  EmbeddingPooling pooling = EmbeddingPooling::kLast;  // the last prompt token's, or the mean
  bool normalize = true;                               // L2-normalise the vector
};

// LoRA adapters over the base model (docs/lora.md). Serving adapters is on when `adapters`
// names any or `enabled` is set (adapters loaded only at run time through the admin endpoints).
struct LoraConfig {
  bool enabled = false;
  int max_loras = 4;       // distinct adapters in one step
  int max_lora_rank = 16;  // largest rank of any adapted module
  int max_cpu_loras = 0;   // adapters held in host memory (LRU); 0: max(max_loras, #adapters)
  // "name=path" entries (JSON: also an object {name: path}); `--lora name=path` appends one.
  std::vector<std::string> adapters;
  // When set, POST /v1/load_lora_adapter and /v1/unload_lora_adapter need 'Authorization:
  // Bearer <admin_api_key>'; empty: only an open server (no tenant keys) accepts them.
  std::string admin_api_key;
  bool active() const { return enabled || !adapters.empty(); }
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int http_port = 8000;   // 0: pick a free port
  int grpc_port = 50051;  // 0: pick a free port
  uint64_t max_body_bytes = 8ull << 20;
  double drain_timeout_seconds = 30.0;
  int http_max_connections = 512;
  double http_request_timeout_seconds = 30.0;  // whole request (headers + body) per connection
  // /v1/responses' in-memory store (store, previous_response_id): at most this many
  // responses, each kept this long. 0 entries: nothing is stored.
  int64_t responses_store_max_entries = 1000;
  double responses_store_ttl_seconds = 3600.0;
  RequestLimits limits;
  EmbeddingConfig embedding;
  // TLS for both listeners when tls_cert_path is set (PEM files); tls_client_ca_path adds
  // mutual TLS on both (clients must present a certificate that CA signed).
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string tls_client_ca_path;
  MetricsCompat metrics_compat = MetricsCompat::kNone;
  // When set, GET /metrics needs 'Authorization: Bearer <metrics_api_key>' (tenant keys do
  // not open it); empty: /metrics is open. Secret: redacted in dumps, never logged. Like every
  // field it can come from the environment (KVSERVE_SERVER_METRICS_API_KEY).
  std::string metrics_api_key;
};

struct TenantConfig {
  std::string name;
  std::vector<std::string> api_keys;   // Bearer tokens; never logged or dumped
  // A file of more keys, one per line (e.g. a mounted Kubernetes secret); LoadConfig reads
  // it into api_keys. Blank lines and surrounding whitespace are ignored.
  std::string api_keys_file;
  // The name of an environment variable holding more keys (separated by commas, spaces or
  // newlines), e.g. one filled from a Kubernetes secret; LoadConfig reads it into api_keys.
  std::string api_keys_env;
  double weight = 1.0;                 // share of the token budget under contention
  int priority = 0;                    // default request priority (lower runs first)
  int max_running = 0;                 // 0: no per-tenant limit
  int max_queued = 0;                  // 0: no per-tenant limit
  // Token-bucket rate limits (server/auth/tenant_rate_limiter.h); 0: unlimited. Input tokens count
  // at admission, output tokens when the request ends.
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  // Meaningful only when has_default_policy; otherwise the tenant inherits
  // compression.default_policy (EffectiveDefaultPolicy below).
  CompressionPolicyKind default_policy = CompressionPolicyKind::kFull;
  bool has_default_policy = false;     // set by the loader when the config names one
  // Compression settings for the tenant's requests that do not give their own; each unset one
  // inherits the server's (EffectiveCompression below). Request > tenant > server.
  int budget = 0;                      // 0: compression.budget
  int window = -1;                     // -1: compression.window
  // KV precision of the tenant's requests that name none; unset: the pool's (cache.k_dtype /
  // v_dtype). One pool precision today, so a set one must be the pool's (Validate).
  std::optional<KvDtype> k_dtype;
  std::optional<KvDtype> v_dtype;
  std::vector<CompressionPolicyKind> allowed_policies;  // empty: all
  std::vector<KvDtype> allowed_kv_dtypes;  // precisions its requests may ask for; empty: all
  // LoRA adapter names its requests may select through `model`; empty: every adapter. Any
  // other adapter answers exactly like an unknown model (404, no existence leak).
  std::vector<std::string> adapters;
  std::string prefix_cache_group;      // tenants sharing a group share prefix-cache blocks;
                                       // empty: the tenant's own name (isolated)
};

struct Config {
  LoggingConfig logging;
  ModelConfig model;
  EngineConfig engine;
  ParallelConfig parallel;
  CacheConfig cache;
  SchedulerConfig scheduler;
  CompressionConfig compression;
  SpeculativeConfig speculative;
  ServerConfig server;
  LoraConfig lora;
  std::vector<TenantConfig> tenants;
  // Not a setting: KVSERVE_* variables that LoadConfig ignored because they cannot be
  // fields (Kubernetes service links such as KVSERVE_SERVICE_HOST, a wrapper's own
  // variables). Names only; `serve` logs them at debug.
  std::vector<std::string> ignored_env;
  // Not a setting: values LoadConfig derived because the configuration left them open (e.g.
  // the host prefix tier a remote KV tier needs), one line each, naming the field and why;
  // `serve` logs them at info.
  std::vector<std::string> derived;
};

// The policy a tenant's requests get when they name none: its own default_policy when the
// config sets one, else compression.default_policy (docs/configuration.md).
inline CompressionPolicyKind EffectiveDefaultPolicy(const Config& config, const TenantConfig* tenant) {
  return tenant != nullptr && tenant->has_default_policy ? tenant->default_policy
                                                         : config.compression.default_policy;
}

// The precisions the pool stores K and V in: the per-side setting, else the kv_dtype shorthand.
inline KvDtype EffectiveKDtype(const CacheConfig& c) { return c.k_dtype.value_or(c.kv_dtype); }
inline KvDtype EffectiveVDtype(const CacheConfig& c) { return c.v_dtype.value_or(c.kv_dtype); }

// The compression defaults a tenant's requests start from: compression.* with the tenant's
// own default_policy, budget and window where it sets them (`tenant` may be null).
inline CompressionConfig EffectiveCompression(const Config& config, const TenantConfig* tenant) {
  CompressionConfig c = config.compression;
  c.default_policy = EffectiveDefaultPolicy(config, tenant);
  if (tenant != nullptr && tenant->budget > 0) c.budget = tenant->budget;
  if (tenant != nullptr && tenant->window >= 0) c.window = tenant->window;
  return c;
}

}  // namespace kvserve::config
