// Token sampling from one row of logits, per-sequence parameters, deterministic per seed.
//
//   raw logits ──► logprobs (log_softmax of the raw row: what `logprobs` reports)
//        │
//        ▼ logit_bias: additive, per listed token
//        ▼ penalties: repetition (prompt ∪ output; divides positive logits, multiplies
//        │            negative ones), presence and frequency (output tokens only)
//        ▼ request masks: min_tokens (EOS/stop ids), allowed_token_ids, bad_words
//        ▼ allowed-token mask (structured outputs): -inf for tokens the grammar rejects
//        ├── temperature == 0 ──► argmax (lowest id on ties)
//        ▼ / temperature
//        ▼ min_p: drop tokens with p < min_p * p_max
//        ▼ top_k: keep the k largest (ties broken by lower id)
//        ▼ top_p: keep the smallest prefix of the sorted tokens whose mass reaches top_p
//        ▼ renormalise, draw u ~ U[0,1) from the sequence's SamplerRng
//
// The order follows vLLM. Same seed, same logits, same history -> same token, whatever the
// batch or thread count. A Sampler owns vocab-sized scratch (no allocation per call unless
// top-N logprobs are requested); it is not thread-safe, use one per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/sampler_rng.h"  // SamplerRng, TokenSeed: shared with the GPU sampler

namespace kvserve::model {

inline constexpr int kMaxLogitBias = 300;

struct SamplingParams {
  float temperature = 1.0f;          // 0: greedy
  int top_k = 0;                     // 0 or -1: disabled
  float top_p = 1.0f;                // (0, 1]
  float min_p = 0.0f;                // [0, 1]
  std::optional<uint64_t> seed;      // none: the engine derives one
  float repetition_penalty = 1.0f;   // > 0; 1: disabled
  float presence_penalty = 0.0f;     // [-2, 2]
  float frequency_penalty = 0.0f;    // [-2, 2]
  std::vector<int32_t> stop_token_ids;
  // OpenAI logit_bias: (token, additive bias), bias in [-100, 100], at most kMaxLogitBias.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // none: no logprobs; 0: the sampled token's only; N: also the N most likely tokens.
  std::optional<int> logprobs;
  // Token masks (-inf), applied after the penalties (scheduler/sampling.h says where they come
  // from): min_tokens_banned while the output is shorter than min_tokens; every token but
  // allowed_token_ids when that is non-empty; the last token of each bad_words sequence whose
  // other tokens end the output.
  int min_tokens = 0;
  std::vector<int32_t> min_tokens_banned;
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::vector<int32_t>> bad_words;

  bool has_masks() const {
    return (min_tokens > 0 && !min_tokens_banned.empty()) || !allowed_token_ids.empty() ||
           !bad_words.empty();
  }

  bool greedy() const { return temperature == 0.0f; }
  // Range checks; errors name the field.
  absl::Status Validate(int vocab_size) const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;    // of `token` under the raw model distribution (if requested)
  bool is_stop = false;    // token is one of stop_token_ids
  std::vector<TokenLogprob> top_logprobs;  // *params.logprobs entries, best first
};

// Speculative decoding: the verdict on one guessed token (Sampler::Verify).
struct VerifyResult {
  SampleResult sample;    // the token emitted at this position: the guess, or the correction
  bool accepted = false;  // sample.token is the guess
};

class Sampler {
 public:
  explicit Sampler(int vocab_size);

  // logits: [vocab] raw row. prompt / output: the sequence's tokens so far (penalties).
  // allowed: structured outputs' token mask (bit i of word i/64: token i may be sampled);
  // empty: every token. Applied after penalties, before temperature and the filters; the
  // reported logprobs stay those of the raw row.
  SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt, std::span<const int32_t> output,
                      SamplerRng& rng, std::span<const uint64_t> allowed = {});

  // Speculative decoding with a point-mass draft (one guessed token, as the n-gram proposer
  // makes): the same processing as Sample, then greedy: accept iff the guess is the argmax
  // (else emit the argmax); sampled: accept with probability p(guess) under the processed
  // distribution, else draw from that distribution with the guess removed. Either way the
  // emitted token has exactly Sample's distribution. Draws one or two uniforms from `rng`.
  VerifyResult Verify(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt, std::span<const int32_t> output, SamplerRng& rng,
                      int32_t draft, std::span<const uint64_t> allowed = {});

  int vocab_size() const { return vocab_; }

 private:
  // Raw row -> work_: logit_bias, penalties, allowed-token mask.
  void Prepare(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
               std::span<const int32_t> output, std::span<const uint64_t> allowed);
  // Temperature and the min_p / top_k / top_p filters over work_: the candidates are
  // order_[0, n) with unnormalised masses probs_[0, n) summing to `total`. Returns n.
  size_t Filter(const SamplingParams& p, double& total);
  // is_stop and the logprobs of r.token from the raw row.
  void Report(std::span<const float> logits, const SamplingParams& p, SampleResult& r);
  void ApplyPenalties(const SamplingParams& p, std::span<const int32_t> prompt,
                      std::span<const int32_t> output);
  int32_t SampleFiltered(const SamplingParams& p, SamplerRng& rng);
  void ApplyMasks(const SamplingParams& p, std::span<const int32_t> output);

  int vocab_;
  std::vector<float> work_;       // [vocab] processed logits
  std::vector<int32_t> order_;    // [vocab] candidate ids
  std::vector<int32_t> counts_;   // [vocab] output-token counts, zero between calls
  std::vector<uint8_t> seen_;     // [vocab] prompt ∪ output marks, zero between calls
                                  // (ApplyMasks also uses it for allowed_token_ids)
  std::vector<double> probs_;     // [vocab]
};

}  // namespace kvserve::model
