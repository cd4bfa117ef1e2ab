#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/token_mask.h"

namespace kvserve::model {
namespace {

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status SamplingParams::Validate(int vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) return FieldError("temperature", "must be >= 0");
  if (top_k < -1) return FieldError("top_k", "must be -1, 0 (disabled) or a positive count");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return FieldError("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return FieldError("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return FieldError("repetition_penalty", "must be > 0");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return FieldError("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return FieldError("frequency_penalty", "must be in [-2, 2]");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) return FieldError("stop_token_ids", absl::StrCat(id, " is not a token id"));
  }
  if (logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return FieldError("logit_bias", absl::StrCat("at most ", kMaxLogitBias, " entries"));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) return FieldError("logit_bias", absl::StrCat(id, " is not a token id"));
    if (!(bias >= -100.0f && bias <= 100.0f)) return FieldError("logit_bias", "biases must be in [-100, 100]");
  }
  auto check_ids = [&](absl::string_view field, std::span<const int32_t> ids) -> absl::Status {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size)
        return FieldError(field, absl::StrCat(id, " is not a token id"));
    }
    return absl::OkStatus();
  };
  if (absl::Status st = check_ids("min_tokens", min_tokens_banned); !st.ok()) return st;
  if (absl::Status st = check_ids("allowed_token_ids", allowed_token_ids); !st.ok()) return st;
  for (const auto& word : bad_words) {
    if (word.empty()) return FieldError("bad_words", "a word has no tokens");
    if (absl::Status st = check_ids("bad_words", word); !st.ok()) return st;
  }
  if (logprobs && (*logprobs < 0 || *logprobs > vocab_size)) {
    return FieldError("logprobs", absl::StrCat("must be in [0, ", vocab_size, "]"));
  }
  return absl::OkStatus();
}

Sampler::Sampler(int vocab_size)
    : vocab_(vocab_size),
      work_(static_cast<size_t>(vocab_size)),
      order_(static_cast<size_t>(vocab_size)),
      counts_(static_cast<size_t>(vocab_size), 0),
      seen_(static_cast<size_t>(vocab_size), 0),
      probs_(static_cast<size_t>(vocab_size)) {}

void Sampler::ApplyMasks(const SamplingParams& p, std::span<const int32_t> output) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  if (static_cast<int64_t>(output.size()) < p.min_tokens) {
    for (int32_t id : p.min_tokens_banned) work_[static_cast<size_t>(id)] = kMasked;
  }
  if (!p.allowed_token_ids.empty()) {
    // seen_ is all zero between calls (ApplyPenalties clears what it marks).
    for (int32_t id : p.allowed_token_ids) seen_[static_cast<size_t>(id)] = 1;
    for (size_t i = 0; i < work_.size(); ++i) {
      if (seen_[i] == 0) work_[i] = kMasked;
    }
    for (int32_t id : p.allowed_token_ids) seen_[static_cast<size_t>(id)] = 0;
  }
  for (const auto& word : p.bad_words) {
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (std::equal(word.begin(), word.end() - 1,
                   output.end() - static_cast<std::ptrdiff_t>(prefix))) {
      work_[static_cast<size_t>(word.back())] = kMasked;
    }
  }
}

void Sampler::ApplyPenalties(const SamplingParams& p, std::span<const int32_t> prompt,
                             std::span<const int32_t> output) {
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool additive = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!repetition && !additive) return;
  // counts_ / seen_ are all-zero between calls; only touched entries are reset at the end.
  for (int32_t t : output) ++counts_[static_cast<size_t>(t)];
  if (repetition) {
    auto penalise = [&](int32_t t) {
      if (seen_[static_cast<size_t>(t)]) return;
      seen_[static_cast<size_t>(t)] = 1;
      float& l = work_[static_cast<size_t>(t)];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t t : prompt) penalise(t);
    for (int32_t t : output) penalise(t);
  }
  if (additive) {
    for (int32_t t : output) {
      int32_t& c = counts_[static_cast<size_t>(t)];
      if (c == 0) continue;  // already applied for this token
      work_[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
      c = 0;
    }
  }
  for (int32_t t : output) counts_[static_cast<size_t>(t)] = 0;
  for (int32_t t : prompt) seen_[static_cast<size_t>(t)] = 0;
  for (int32_t t : output) seen_[static_cast<size_t>(t)] = 0;
}

int32_t Sampler::SampleFiltered(const SamplingParams& p, SamplerRng& rng) {
  double total = 0.0;
  const size_t n = Filter(p, total);
  if (!(total > 0.0) || !std::isfinite(total)) return order_[0];
  const double u = rng.Uniform() * total;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_[n - 1];  // rounding: u landed on the very top of the range
}

size_t Sampler::Filter(const SamplingParams& p, double& total_out) {
  const float inv_t = 1.0f / p.temperature;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab_; ++i) {
    work_[static_cast<size_t>(i)] *= inv_t;
    max_logit = std::max(max_logit, work_[static_cast<size_t>(i)]);
  }
  // min_p: p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p).
  const float floor = p.min_p > 0.0f ? max_logit + std::log(p.min_p) : -std::numeric_limits<float>::infinity();
  size_t n = 0;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();  // structured outputs' mask
  for (int i = 0; i < vocab_; ++i) {
    const float l = work_[static_cast<size_t>(i)];
    if (l >= floor && l != kMasked) order_[n++] = i;
  }
  if (n == 0) {  // nothing but masked tokens (cannot happen with a grammar's mask)
    for (int i = 0; i < vocab_; ++i) order_[n++] = i;
  }
  auto better = [this](int32_t a, int32_t b) {
    const float la = work_[static_cast<size_t>(a)];
    const float lb = work_[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  };
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::nth_element(order_.begin(), order_.begin() + p.top_k, order_.begin() + static_cast<ptrdiff_t>(n), better);
    n = static_cast<size_t>(p.top_k);
  }
  if (p.top_p < 1.0f) std::sort(order_.begin(), order_.begin() + static_cast<ptrdiff_t>(n), better);

  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp(static_cast<double>(work_[static_cast<size_t>(order_[i])]) - max_logit);
    total += probs_[i];
  }
  if (p.top_p < 1.0f) {
    // Smallest prefix (best first) holding top_p of the mass; always at least one token.
    double mass = 0.0;
    size_t keep = 0;
    while (keep < n) {
      mass += probs_[keep++];
      if (mass >= static_cast<double>(p.top_p) * total) break;
    }
    n = keep;
    total = mass;
  }
  total_out = total;
  return n;
}

void Sampler::Prepare(std::span<const float> logits, const SamplingParams& p,
                      std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::span<const uint64_t> allowed) {
  KVS_CHECK(static_cast<int>(logits.size()) == vocab_, "logits row of ", logits.size(),
            " for vocab ", vocab_);
  std::copy(logits.begin(), logits.end(), work_.begin());
  for (const auto& [id, bias] : p.logit_bias) {
    KVS_CHECK(id >= 0 && id < vocab_, "logit_bias token ", id, " outside the vocabulary");
    work_[static_cast<size_t>(id)] += bias;
  }
  ApplyPenalties(p, prompt, output);
  if (p.has_masks()) ApplyMasks(p, output);
  // Ids past the mask (a model vocabulary padded beyond the tokenizer's) are never allowed.
  if (!allowed.empty()) base::MaskLogits(allowed, work_);
}

SampleResult Sampler::Sample(std::span<const float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output,
                             SamplerRng& rng, std::span<const uint64_t> allowed) {
  SampleResult r;
  Prepare(logits, p, prompt, output, allowed);
  if (p.greedy()) {
    r.token = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else {
    r.token = SampleFiltered(p, rng);
  }
  Report(logits, p, r);
  return r;
}

VerifyResult Sampler::Verify(std::span<const float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output,
                             SamplerRng& rng, int32_t draft, std::span<const uint64_t> allowed) {
  VerifyResult v;
  Prepare(logits, p, prompt, output, allowed);
  if (p.greedy()) {
    // The target's own choice is deterministic: the guess survives exactly when it is that choice.
    v.sample.token =
        static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
    v.accepted = v.sample.token == draft;
  } else {
    // Rejection sampling against a point-mass draft q = onehot(draft): accept with probability
    // min(1, p(d) / q(d)) = p(d); otherwise draw from norm(max(p - q, 0)), which is p with d
    // removed and renormalised. The emitted token then follows p exactly (docs/speculative.md).
    double total = 0.0;
    const size_t n = Filter(p, total);
    size_t d_at = n;
    for (size_t i = 0; i < n; ++i) {
      if (order_[i] == draft) {
        d_at = i;
        break;
      }
    }
    const double p_draft = d_at < n ? probs_[d_at] : 0.0;
    if (!(total > 0.0) || !std::isfinite(total)) {
      v.sample.token = order_[0];  // degenerate row: as SampleFiltered
    } else if (rng.Uniform() * total < p_draft) {
      v.sample.token = draft;
    } else {
      if (d_at < n) probs_[d_at] = 0.0;
      const double rest = total - p_draft;
      v.sample.token = order_[0];
      if (rest > 0.0) {
        const double u = rng.Uniform() * rest;
        double acc = 0.0;
        size_t last = n;
        for (size_t i = 0; i < n; ++i) {
          if (probs_[i] <= 0.0) continue;
          last = i;
          acc += probs_[i];
          if (u < acc) break;
        }
        if (last < n) v.sample.token = order_[last];
      }
    }
    v.accepted = v.sample.token == draft;
  }
  Report(logits, p, v.sample);
  return v;
}

void Sampler::Report(std::span<const float> logits, const SamplingParams& p, SampleResult& r) {
  r.is_stop = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), r.token) != p.stop_token_ids.end();

  if (p.logprobs) {
    // Log-softmax of the raw row (before penalties and temperature), as vLLM reports by default.
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    const double lse = max_logit + std::log(sum);
    r.logprob = static_cast<float>(logits[static_cast<size_t>(r.token)] - lse);
    const int top = *p.logprobs;
    if (top > 0) {
      for (int i = 0; i < vocab_; ++i) order_[static_cast<size_t>(i)] = i;
      auto better = [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] != logits[static_cast<size_t>(b)]
                   ? logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]
                   : a < b;
      };
      std::partial_sort(order_.begin(), order_.begin() + top, order_.end(), better);
      r.top_logprobs.reserve(static_cast<size_t>(top));
      for (int i = 0; i < top; ++i) {
        const int32_t id = order_[static_cast<size_t>(i)];
        r.top_logprobs.push_back({id, static_cast<float>(logits[static_cast<size_t>(id)] - lse)});
      }
    }
  }
}

}  // namespace kvserve::model
