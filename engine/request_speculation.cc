#include "engine/request_speculation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("speculative.", field, ": ", why));
}

}  // namespace

absl::Status ValidateSpeculative(const SpeculativeRequest& r, bool draft_model_loaded) {
  if (r.method == config::SpeculativeMethod::kDraft && !draft_model_loaded) {
    return Invalid("method", "'draft' needs a draft model and this server has none loaded "
                             "(start it with speculative.draft_model on the CPU backend)");
  }
  if (r.num_tokens && (*r.num_tokens < 1 || *r.num_tokens > kMaxDraftTokens)) {
    return Invalid("num_tokens", absl::StrCat("must be in [1,", kMaxDraftTokens, "]"));
  }
  if (r.ngram_min && (*r.ngram_min < 1 || *r.ngram_min > kMaxNgram)) {
    return Invalid("ngram_min", absl::StrCat("must be in [1,", kMaxNgram, "]"));
  }
  if (r.ngram_max && (*r.ngram_max < 1 || *r.ngram_max > kMaxNgram)) {
    return Invalid("ngram_max", absl::StrCat("must be in [1,", kMaxNgram, "]"));
  }
  if (r.ngram_min && r.ngram_max && *r.ngram_min > *r.ngram_max) {
    return Invalid("ngram_min", "must not exceed speculative.ngram_max");
  }
  return absl::OkStatus();
}

speculative::SpecParams ResolveSpeculative(const config::SpeculativeConfig& server,
                                           const SpeculativeRequest& r) {
  speculative::SpecParams p = speculative::FromConfig(server);
  if (r.method) p.method = *r.method;
  if (r.num_tokens) p.num_tokens = *r.num_tokens;
  if (r.ngram_min) p.ngram_min = *r.ngram_min;
  if (r.ngram_max) p.ngram_max = *r.ngram_max;
  // One side given against the other's server value: the given one wins, the other follows.
  if (p.ngram_min > p.ngram_max) {
    if (r.ngram_min) {
      p.ngram_max = p.ngram_min;
    } else {
      p.ngram_min = p.ngram_max;
    }
  }
  return p;
}

}  // namespace kvserve::engine
