// Value types that cross between the front ends and the engine: what a request asks
// for (RequestSpec, in request_spec.h) and what comes back (TokenEvent). No back-pointers,
// printable, copyable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

enum class FinishReason { kStop, kLength, kAbort, kError };
std::string_view Name(FinishReason r);  // "stop", "length", "abort", "error" (OpenAI/vLLM names)

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // top-N alternatives, best first
  int32_t rank = 0;             // prompt logprobs: 1 + tokens with a higher logit (0: unset)
};

// One eviction round of one sequence, for the audit record.
struct EvictionRecord {
  int round = 0;
  int64_t at_token = 0;            // tokens seen by the sequence when the round ran
  std::vector<int64_t> positions;  // absolute positions evicted (ascending)
  uint64_t token_ids_hash = 0;     // 64-bit hash of the evicted token ids, in position order
};

// What compression did to one sequence; carried in usage.kv_compression.
struct CompressionSummary {
  std::string policy = "full";
  int64_t budget = 0;  // 0 for full
  int64_t rounds = 0;
  int64_t evicted_tokens = 0;
  int64_t evicted_prompt_tokens = 0;
  int64_t peak_kv_tokens = 0;         // most tokens held at once
  double compression_ratio = 1.0;     // tokens seen / peak tokens held
  int64_t demoted_tokens = 0;         // tokens rounds moved into lower-precision tiers (per KV row)
  int64_t peak_kv_bytes = 0;          // most KV bytes held at once (blocks, scales, demotion tiers)
  double kv_bytes_per_token = 0.0;    // peak_kv_bytes / tokens seen
  int32_t compressed_layers = 0;      // layers rounds may evict from (hybrid models: the global
                                      // ones; window layers keep their window); 0 for full
  std::vector<EvictionRecord> audit;  // only when the request asked for it
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;     // summed over the n samples
  int64_t cached_prompt_tokens = 0;  // prefix-cache hit
  CompressionSummary compression;    // of sample 0 (all samples share the policy)
  // Speculative decoding, summed over the n samples: guesses verified, and of them accepted
  // (docs/speculative.md). Both 0 when the request did not speculate.
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
};

// Engine → consumer. Events of the n samples of one request interleave, each tagged
// with its sample index. The final event of a sample has `finish` set; the stream closes
// after the final event of the last sample, which also carries `usage`.
struct TokenEvent {
  int sample_index = 0;
  std::vector<int32_t> token_ids;       // newly generated ids (may be empty in a final event)
  std::vector<TokenLogprobs> logprobs;  // parallel to token_ids when requested
  // prompt_logprobs: on the request's first event (any sample), the prompt tokens' logprobs
  // from position 1 on (the first prompt token has none).
  std::vector<TokenLogprobs> prompt_logprobs;
  // Embedding requests: the pooled prompt hidden states, on the request's first event.
  std::vector<float> embedding;
  std::optional<FinishReason> finish;
  std::optional<int32_t> stop_token_id;  // the stop token id that finished the sample, if any
  std::optional<RequestUsage> usage;     // on the request's last event
  std::string error;                     // set with FinishReason::kError
  // With FinishReason::kError: true when the model is unreachable (a pipeline stage died or
  // hangs: docs/parallelism.md), which the front ends report as 503 / UNAVAILABLE, else 500.
  bool unavailable = false;
};

std::string ToString(const TokenEvent& e);

}  // namespace kvserve::engine
