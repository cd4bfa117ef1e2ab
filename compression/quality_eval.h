// Quality of a compression policy on a real model, one sequence at a time, compressing
// exactly as the serving runner does (KvCompressor after every forward chunk):
//
//   perplexity: the text is fed in chunks of `chunk` tokens after a BOS; every token's
//               next-token log-probability is read from the logits of its row, so tokens
//               late in a chunk see the chunk in full and everything the policy kept.
//   passkey:    the prompt is prefilled in chunks (rounds between chunks), then the answer
//               is decoded greedily one token at a time (a round may follow each token);
//               correct iff every answer token is the argmax.
//
//
// Decode-time mode (teacher forcing; the setting TriAttention is built for): a short prompt
// is prefilled, then every token of a forced text is fed as its own decode step, so rounds
// run after decode steps exactly as during a long generation:
//   perplexity: every forced token scored from the previous step's logits;
//   passkey:    filler + key + filler + question forced, then the answer decoded greedily.
//
// The sequence has its own host KV storage (identity block table): a round compacts into
// the front blocks and the tail blocks are simply written again as the sequence grows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/compression_policy.h"
#include "compression/key_basis.h"
#include "compression/policy_params.h"
#include "config/config.h"
#include "model/forward_model.h"

namespace kvserve::compression {

struct EvalOptions {
  int chunk = 64;                 // prefill / scoring chunk (tokens per forward)
  int block_size = 16;
  config::KvDtype kv_dtype = config::KvDtype::kFp32;  // K and V, unless k_dtype / v_dtype say
  std::optional<config::KvDtype> k_dtype;
  std::optional<config::KvDtype> v_dtype;
  int int4_group = 32;
  // Demotion tiers (params.demote_tokens[t] tokens of demote_dtypes[t], K and V): each on its
  // own host storage, granted in full from the first token (as the server grants them) and
  // counted in the peak KV bytes from then on.
  std::vector<config::KvDtype> demote_dtypes;
  // A low-rank key tier after them (params.demote_tokens[demote_dtypes.size()] tokens) when
  // lowrank_key_rank > 0: keys as that many coefficients on `key_basis` in lowrank_k_dtype,
  // values in lowrank_v_dtype (cache.lowrank_*; kernels/cpu/low_rank_keys.h).
  int lowrank_key_rank = 0;
  config::KvDtype lowrank_k_dtype = config::KvDtype::kBf16;
  config::KvDtype lowrank_v_dtype = config::KvDtype::kInt8;
  bool lowrank_query_aware = true;  // cache.lowrank_query_aware
  const KeyBasis* key_basis = nullptr;
};

struct SequenceStats {
  int64_t tokens_seen = 0;        // KV entries ever written
  int64_t peak_kv_tokens = 0;     // most slots held at once
  int64_t rounds = 0;
  // KV bytes the sequence held at its peak: blocks (of every layer, K and V, scales
  // included) times the layout's bytes per block.
  int64_t peak_kv_bytes = 0;
  // Bytes of KV per token the sequence has seen, at its peak: precision and eviction together.
  double bytes_per_token() const {
    return tokens_seen > 0 ? static_cast<double>(peak_kv_bytes) / static_cast<double>(tokens_seen) : 0.0;
  }
  double compression_ratio() const {
    return peak_kv_tokens > 0 ? static_cast<double>(tokens_seen) / static_cast<double>(peak_kv_tokens) : 1.0;
  }
};

struct PerplexityResult {
  double nll = 0.0;               // summed over scored tokens (natural log)
  int64_t scored = 0;
  SequenceStats stats;
  double perplexity() const;
};

struct PasskeyResult {
  bool correct = false;
  std::vector<int32_t> output;    // greedy tokens, answer.size() of them
  SequenceStats stats;
  // Diagnosis: of the `watch` positions (e.g. the key sentence), the fraction still held in
  // the KV when the answer starts, averaged over the (layer, KV head) rows; 1 with no
  // compression or nothing watched. Tells "the key was evicted" from "the key was kept but
  // the model did not find it".
  double watched_held = 1.0;
};

// `params.kind` full runs uncompressed. `context` may be null for full. `tokens` start
// with BOS (scored from the second token on). The model must accept `chunk` rows per step.
absl::StatusOr<PerplexityResult> EvalPerplexity(model::ForwardModel& model, const PolicyContext* context,
                                                const PolicyParams& params, std::span<const int32_t> tokens,
                                                const EvalOptions& options);

absl::StatusOr<PasskeyResult> EvalPasskey(model::ForwardModel& model, const PolicyContext* context,
                                          const PolicyParams& params, std::span<const int32_t> prompt,
                                          std::span<const int32_t> answer, const EvalOptions& options,
                                          std::span<const int32_t> watch = {});

// Decode-time: `prompt` (params.prompt_len tokens, starting with BOS) prefilled in chunks of
// options.chunk, then `forced` one token per step; every forced token is scored.
absl::StatusOr<PerplexityResult> EvalDecodePerplexity(model::ForwardModel& model, const PolicyContext* context,
                                                      const PolicyParams& params, std::span<const int32_t> prompt,
                                                      std::span<const int32_t> forced, const EvalOptions& options);

// Decode-time: `prompt` prefilled, `forced` fed one token per step, then `answer` decoded
// greedily (one token per step); correct iff every answer token is the argmax. `watch`:
// absolute positions whose survival is reported in PasskeyResult::watched_held.
absl::StatusOr<PasskeyResult> EvalDecodePasskey(model::ForwardModel& model, const PolicyContext* context,
                                                const PolicyParams& params, std::span<const int32_t> prompt,
                                                std::span<const int32_t> forced, std::span<const int32_t> answer,
                                                const EvalOptions& options, std::span<const int32_t> watch = {});

}  // namespace kvserve::compression
