// RequestSpec: everything the engine needs to run one request, validated and tokenized
// by a front end (HTTP or gRPC) before Submit. A value type: no JSON, no proto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "scheduler/sampling.h"

namespace kvserve::engine {

// Per-request KV compression; unset fields fall back to tenant, then server defaults.
struct CompressionRequest {
  std::optional<config::CompressionPolicyKind> policy;
  std::optional<int> budget;
  std::optional<double> ratio;  // keep this fraction of the prompt (alternative to budget)
  std::optional<int> divide_length;
  std::optional<int> window;
  std::optional<int> sinks;
  std::optional<bool> protect_prompt;
  // KV precision asked for (`kv_dtype` sets both; `k_dtype` / `v_dtype` one side). Served
  // only where the pool holds that precision (ResolveCompression).
  std::optional<config::KvDtype> k_dtype;
  std::optional<config::KvDtype> v_dtype;
  // Importance-aware mixed precision: (dtype, tokens) pairs, e.g. {int8: 1024, int4: 2048}:
  // after a round that many of the next most important tokens are held in the server's
  // demotion tier of that dtype (cache.demote_dtypes) instead of being evicted.
  std::vector<std::pair<config::KvDtype, int64_t>> demote;
  // Tokens for the low-rank key tier (`"lowrank": N` in the same object; cache.lowrank_key_rank):
  // the next most important after the dtype tiers, keys as coefficients on the key basis.
  std::optional<int64_t> demote_lowrank;
  bool audit = false;
};

// Per-request speculative decoding (docs/speculative.md); unset fields take the server's
// speculative.* settings. A method other than none on a backend or sequence that cannot
// draft (CUDA, h2o compression, every layer windowed) decodes normally: output is the same either
// way. Hybrid models with layer groups draft: a rollback shrinks their window tables too.
struct SpeculativeRequest {
  std::optional<config::SpeculativeMethod> method;
  std::optional<int> num_tokens;  // [1, kMaxDraftTokens]
  std::optional<int> ngram_min;   // [1, kMaxNgram]
  std::optional<int> ngram_max;   // [ngram_min, kMaxNgram]
};
inline constexpr int kMaxDraftTokens = 16;
inline constexpr int kMaxNgram = 64;

struct RequestSpec {
  std::string request_id;              // unique; assigned by the front end
  std::string tenant;                  // resolved tenant name; empty: the default tenant
  std::vector<int32_t> prompt_tokens;  // already tokenized (BOS included when the model wants it)
  scheduler::SamplingParams sampling;  // seed unset: engine.seed mixed with the request id
  int max_tokens = 16;                 // new tokens per sample
  int min_tokens = 0;                  // EOS/stop ids ignored before this many tokens
  int n = 1;                           // parallel samples sharing the prompt's KV blocks
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int priority = 0;        // lower runs first (queue_policy=priority)
  std::string cache_salt;  // per-request prefix-cache isolation
  // LoRA adapter to run over the base (the request's `model` named it); empty: the base alone.
  std::string lora;
  CompressionRequest compression;
  SpeculativeRequest speculative;
};

}  // namespace kvserve::engine
