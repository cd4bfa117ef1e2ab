// RequestSpec: everything the engine needs to run one request, validated and tokenized
// by a front end (HTTP or gRPC) before Submit. A value type: no JSON, no proto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace kvserve::engine {

// Sampling knobs, as OpenAI/vLLM name them. Ranges are checked by ValidateSpec.
struct SamplingOptions {
  float temperature = 1.0f;        // 0: greedy
  float top_p = 1.0f;              // (0, 1]
  int top_k = 0;                   // 0: off
  float min_p = 0.0f;              // [0, 1]
  std::optional<uint64_t> seed;    // none: engine.seed mixed with the request id
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f; // > 0; 1: off
  int logprobs = 0;                // top-N logprobs per generated token; 0: none
  bool return_logprobs = false;    // logprob of the sampled token even with logprobs == 0
};

// Per-request KV compression; unset fields fall back to tenant, then server defaults.
struct CompressionRequest {
  std::optional<config::CompressionPolicyKind> policy;
  std::optional<int> budget;
  std::optional<double> ratio;         // keep this fraction of the prompt (alternative to budget)
  std::optional<int> divide_length;
  std::optional<int> window;
  std::optional<int> sinks;
  std::optional<bool> protect_prompt;
  bool audit = false;
};

struct RequestSpec {
  std::string request_id;              // unique; assigned by the front end
  std::string tenant;                  // resolved tenant name; empty: the default tenant
  std::vector<int32_t> prompt_tokens;  // already tokenized (BOS included when the model wants it)
  SamplingOptions sampling;
  int max_tokens = 16;                 // new tokens per sample
  int min_tokens = 0;                  // EOS/stop ids ignored before this many tokens
  int n = 1;                           // parallel samples sharing the prompt's KV blocks
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int priority = 0;                    // lower runs first (queue_policy=priority)
  std::string cache_salt;              // per-request prefix-cache isolation
  CompressionRequest compression;
};

}  // namespace kvserve::engine
