// Sampling parameters as the scheduler carries them to a model runner: resolved values
// (the seed is always set by the time a sequence is scheduled). Front ends fill the same
// struct in engine::RequestSpec; ranges are validated there.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace kvserve::structured {
class CompiledGrammar;  // structured/compiled_grammar.h; only the model runner looks inside
}  // namespace kvserve::structured

namespace kvserve::scheduler {

// The OpenAI limit on logit_bias entries (model::kMaxLogitBias is the sampler's copy).
inline constexpr int kMaxLogitBias = 300;

// OpenAI `logit_bias`: added to the token's logit before penalties and sampling.
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;  // [-100, 100]: -100 bans the token, +100 all but forces it
};

// Embeddings (/v1/embeddings): the prompt's final hidden states (after the final norm), pooled
// by the engine: the last prompt token's, or the mean over every prompt token.
enum class Pooling : uint8_t { kNone, kLast, kMean };

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0: off
  float min_p = 0.0f;               // [0, 1]
  std::optional<uint64_t> seed;     // resolved by the engine before scheduling
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1: off
  int logprobs = 0;                 // top-N alternatives per generated token; 0: none
  // vLLM's prompt_logprobs (and completions' echo with logprobs): -1 off; N >= 0: the runner
  // reports each prompt token's logprob (from position 1: the first has no context) with N
  // alternatives, from the prefill's logits (StepResult::prompt_logprobs).
  int prompt_logprobs = -1;
  Pooling embed = Pooling::kNone;     // not none: the runner reports prompt hidden states
  std::vector<LogitBias> logit_bias;  // distinct tokens, checked against the vocabulary
  int sample_index = 0;             // which of the request's n samples (seeds differ per sample)
  // vLLM's min_tokens: while fewer than min_tokens tokens were generated, these ids (EOS unless
  // ignore_eos, and stop_token_ids; filled by the engine) are masked, so no sample ends early.
  int min_tokens = 0;
  std::vector<int32_t> min_tokens_banned;
  // vLLM's allowed_token_ids: non-empty, only these may be sampled (checked against the
  // vocabulary).
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words as token sequences: the last token of a sequence is masked when the
  // sample's output ends with the sequence's other tokens (a one-token word is always masked).
  std::vector<std::vector<int32_t>> bad_words;
  // Structured outputs: the runner masks the tokens this grammar rejects before sampling
  // (null: unconstrained). Shared by every sample and request using the same grammar.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

}  // namespace kvserve::scheduler
