#include "engine/request_validation.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

absl::Status ValidateSampling(const RequestSpec& spec, int vocab_size) {
  const auto& s = spec.sampling;
  if (!(s.temperature >= 0.0f) || s.temperature > 100.0f) return Invalid("temperature", "must be in [0,100]");
  if (!(s.top_p > 0.0f) || s.top_p > 1.0f) return Invalid("top_p", "must be in (0,1]");
  if (s.top_k < 0) return Invalid("top_k", "must be >= 0 (0 disables it)");
  if (!(s.min_p >= 0.0f) || s.min_p > 1.0f) return Invalid("min_p", "must be in [0,1]");
  if (!(std::fabs(s.presence_penalty) <= 2.0f)) return Invalid("presence_penalty", "must be in [-2,2]");
  if (!(std::fabs(s.frequency_penalty) <= 2.0f)) return Invalid("frequency_penalty", "must be in [-2,2]");
  if (!(s.repetition_penalty > 0.0f) || s.repetition_penalty > 10.0f) {
    return Invalid("repetition_penalty", "must be in (0,10]");
  }
  if (s.logprobs < 0 || s.logprobs > 20) return Invalid("logprobs", "must be in [0,20]");
  if (s.prompt_logprobs < -1 || s.prompt_logprobs > 20)
    return Invalid("prompt_logprobs", "must be in [0,20]");
  if (s.logit_bias.size() > static_cast<size_t>(scheduler::kMaxLogitBias)) {
    return Invalid("logit_bias", absl::StrCat("at most ", scheduler::kMaxLogitBias, " entries"));
  }
  for (const auto& b : s.logit_bias) {
    if (b.token < 0 || b.token >= vocab_size) {
      return Invalid("logit_bias", absl::StrCat("token id ", b.token, " is outside the vocabulary"));
    }
    if (!(b.bias >= -100.0f && b.bias <= 100.0f)) return Invalid("logit_bias", "biases must be in [-100,100]");
  }
  for (int32_t t : spec.stop_token_ids) {
    if (t < 0 || t >= vocab_size) return Invalid("stop_token_ids", absl::StrCat("token id ", t, " is outside the vocabulary"));
  }
  for (int32_t t : s.allowed_token_ids) {
    if (t < 0 || t >= vocab_size)
      return Invalid("allowed_token_ids",
                     absl::StrCat("token id ", t, " is outside the vocabulary"));
  }
  for (const auto& word : s.bad_words) {
    if (word.empty()) return Invalid("bad_words", "a word has no tokens");
    for (int32_t t : word) {
      if (t < 0 || t >= vocab_size)
        return Invalid("bad_words", absl::StrCat("token id ", t, " is outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
