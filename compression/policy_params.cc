#include "compression/policy_params.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::compression {

using config::CompressionPolicyKind;

PolicyParams ParamsFromConfig(const config::CompressionConfig& c, CompressionPolicyKind kind, int64_t prompt_len) {
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
    case CompressionPolicyKind::kStreamingLlm: return std::max(p.sinks, pinned);
    default: return pinned;
  }
}

int64_t TargetLength(const PolicyParams& p) {
  switch (p.kind) {
    case CompressionPolicyKind::kStreamingLlm: return FirstEvictableSlot(p) + p.window;
    default: return p.budget;
  }
}

absl::Status ValidateParams(const PolicyParams& p) {
  auto bad = [](std::string_view field, const std::string& why) {
    // "kv_compression.budget (90) must ..." reads better than "kv_compression.budget: (90) ...".
    return absl::InvalidArgumentError(absl::StrCat("kv_compression.", absl::string_view(field.data(), field.size()),
                                                   why.starts_with("(") ? " " : ": ", why));
  };
  if (p.kind == CompressionPolicyKind::kAuto) {
    return bad("policy", "`auto` must be resolved to a concrete policy before one is created");
  }
  if (p.kind == CompressionPolicyKind::kFull) return absl::OkStatus();
  if (p.budget < 1 && p.kind != CompressionPolicyKind::kStreamingLlm) {  // streamingllm: sinks + window
    return bad("budget", absl::StrCat("must be >= 1, got ", p.budget));
  }
  if (p.divide_length < 1) return bad("divide_length", absl::StrCat("must be >= 1, got ", p.divide_length));
  if (p.window < 0) return bad("window", absl::StrCat("must be >= 0, got ", p.window));
  if (p.sinks < 0) return bad("sinks", absl::StrCat("must be >= 0, got ", p.sinks));
  if (p.prompt_len < 0) return bad("prompt", "negative prompt length");
  const int64_t lo = FirstEvictableSlot(p);
  switch (p.kind) {
    case CompressionPolicyKind::kStreamingLlm:
      if (p.window < 1) return bad("window", "streamingllm needs a recent window of at least 1 token");
      return absl::OkStatus();
    case CompressionPolicyKind::kSnapKv:
      if (p.window < 1) return bad("window", "snapkv needs an observation window of at least 1 token");
      break;
    default: break;
  }
  const int64_t window = p.kind == CompressionPolicyKind::kSnapKv ? p.window : 0;
  if (p.budget <= lo + window) {
    return bad("budget", absl::StrCat("(", p.budget, ") must exceed the protected prompt (", lo, " tokens) plus the ",
                                      "window (", window, " tokens); raise the budget or set protect_prompt=false"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::compression
