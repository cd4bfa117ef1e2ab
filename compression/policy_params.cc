#include "compression/policy_params.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "config/fields.h"

namespace kvserve::compression {

using config::CompressionPolicyKind;

PolicyParams ParamsFromConfig(const config::CompressionConfig& c, CompressionPolicyKind kind,
                              int64_t prompt_len) {
  PolicyParams p;
  p.kind = kind;
  p.budget = c.budget;
  p.divide_length = c.divide_length;
  p.window = c.window;
  p.sinks = c.sinks;
  p.protect_prompt = c.protect_prompt;
  p.prompt_len = prompt_len;
  return p;
}

int64_t FirstEvictableSlot(const PolicyParams& p) {
  const int64_t pinned = p.protect_prompt ? p.prompt_len : 0;
  switch (p.kind) {
    case CompressionPolicyKind::kStreamingLlm:
      return std::max(p.sinks, pinned);
    case CompressionPolicyKind::kTriAttention:
      return p.protect_prompt ? pinned : p.sinks;
    default:
      return pinned;
  }
}

int64_t TargetLength(const PolicyParams& p) { return p.budget; }

int64_t SlackLength(const PolicyParams& p) {
  if (p.divide_length > 0) return p.divide_length;
  return std::min(kDefaultSlackCap, std::max<int64_t>(1, p.budget / 4));
}

int64_t DraftRoom(const PolicyParams& p, int64_t phys_len) {
  switch (p.kind) {
    case CompressionPolicyKind::kFull:
      return std::numeric_limits<int64_t>::max();
    case CompressionPolicyKind::kH2O:
      return 0;
    case CompressionPolicyKind::kTriAttention:
    case CompressionPolicyKind::kStreamingLlm:
    case CompressionPolicyKind::kSnapKv:
    case CompressionPolicyKind::kAuto:
      break;
  }
  return std::max<int64_t>(0, TargetLength(p) + SlackLength(p) - phys_len - 1);
}

int64_t RecentWindow(const PolicyParams& p) {
  switch (p.kind) {
    case CompressionPolicyKind::kSnapKv:
      return p.window < 0 ? kDefaultSnapKvWindow : p.window;
    case CompressionPolicyKind::kStreamingLlm:
      return std::max<int64_t>(0, p.budget - FirstEvictableSlot(p));
    case CompressionPolicyKind::kTriAttention:
      // An explicit window is honoured either way; by default a protected prompt (the
      // paper's setting) has none, an unprotected one the vLLM port's.
      if (p.window >= 0) return p.window;
      if (p.protect_prompt) return 0;
      return std::min(kDefaultTriRecentWindow,
                      std::max<int64_t>(0, (p.budget - FirstEvictableSlot(p)) / 2));
    default:
      return 0;
  }
}

absl::Status ValidateParams(const PolicyParams& p) {
  auto bad = [](std::string_view field, const std::string& why) {
    // "kv_compression.budget (90) must ..." reads better than "kv_compression.budget: (90) ...".
    return absl::InvalidArgumentError(absl::StrCat("kv_compression.",
                                                   absl::string_view(field.data(), field.size()),
                                                   why.starts_with("(") ? " " : ": ", why));
  };
  if (p.kind == CompressionPolicyKind::kAuto) {
    return bad("policy", "`auto` must be resolved to a concrete policy before one is created");
  }
  if (p.kind == CompressionPolicyKind::kFull) return absl::OkStatus();
  if (p.budget < 1) return bad("budget", absl::StrCat("must be >= 1, got ", p.budget));
  if (p.divide_length < 0)
    return bad("divide_length", absl::StrCat("must be >= 0 (0: default), got ", p.divide_length));
  if (p.window < -1)
    return bad("window", absl::StrCat("must be >= 0 (or -1: default), got ", p.window));
  if (p.sinks < 0) return bad("sinks", absl::StrCat("must be >= 0, got ", p.sinks));
  if (p.prompt_len < 0) return bad("prompt", "negative prompt length");
  if (p.tri_max_offset < 0)
    return bad("max_offset", absl::StrCat("must be >= 0 (0: context), got ", p.tri_max_offset));
  for (int64_t n : p.demote_tokens) {
    if (n < 0) return bad("demote", absl::StrCat("token counts must be >= 0, got ", n));
  }
  if (p.demotes() && p.kind != CompressionPolicyKind::kTriAttention) {
    return bad("demote",
               absl::StrCat(
                   "needs policy triattention (it ranks every held token, demoted ones included); ",
                   "policy ", base::AsAbsl(config::Name(p.kind)), " does not"));
  }
  const int64_t lo = FirstEvictableSlot(p);
  if (p.kind == CompressionPolicyKind::kSnapKv && RecentWindow(p) < 1) {
    return bad("window", "snapkv needs an observation window of at least 1 token");
  }
  // streamingllm keeps B - lo recent slots; the others must leave at least one slot to select.
  const int64_t window = p.kind == CompressionPolicyKind::kStreamingLlm ? 0 : RecentWindow(p);
  if (p.budget <= lo + window) {
    return bad("budget", absl::StrCat("(", p.budget, ") must exceed the protected prefix (", lo,
                                      " tokens) plus the ", "window (", window,
                                      " tokens); raise the budget or set protect_prompt=false"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::compression
