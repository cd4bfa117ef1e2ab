#include "server/core/request_builder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "config/fields.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {
namespace {

absl::Status CheckRange(std::string_view field, double v, double lo, double hi,
                        bool lo_open = false) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return absl::OkStatus();
  return FieldError(field, absl::StrCat("must be in ", lo_open ? "(" : "[", lo, ", ", hi,
                                        "], got ", v));
}

absl::Status CheckTokenIds(std::string_view field, const std::vector<int32_t>& ids,
                           int32_t vocab_size) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return FieldError(field, absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                                            vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// Bounds on the request masks (their cost is per sampled token).
constexpr int kMaxMaskEntries = 1 << 20;
constexpr int kMaxBadWords = 256;

// vLLM's bad_words: each word (leading spaces stripped) as tokenized alone, without special
// tokens, and also after a space when that gives as many tokens with another first token (the
// word inside a text); distinct sequences only.
absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizeBadWords(
    const std::vector<std::string>& words, const TextCodec& codec) {
  std::vector<std::vector<int32_t>> out;
  auto add = [&](std::vector<int32_t> ids) {
    if (!ids.empty() && std::find(out.begin(), out.end(), ids) == out.end())
      out.push_back(std::move(ids));
  };
  for (const std::string& word : words) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(word);
    const std::string_view bare(stripped.data(), stripped.size());
    KVS_ASSIGN_OR_RETURN(std::vector<int32_t> alone,
                         codec.Encode(bare, /*add_special_tokens=*/false));
    KVS_ASSIGN_OR_RETURN(
        std::vector<int32_t> spaced,
        codec.Encode(absl::StrCat(" ", base::AsAbsl(bare)), /*add_special_tokens=*/false));
    const bool spaced_is_a_word =
        !alone.empty() && spaced.size() == alone.size() && spaced.front() != alone.front();
    add(std::move(alone));
    if (spaced_is_a_word) add(std::move(spaced));
  }
  return out;
}

std::string TenantName(const config::TenantConfig* tenant) {
  return tenant == nullptr ? std::string() : tenant->name;
}

}  // namespace

absl::Status ValidateGenerationRequest(const GenerationRequest& r, const config::RequestLimits& limits) {
  if (r.kind == RequestKind::kCompletion && r.prompts.empty()) {
    return FieldError("prompt", "is required and must not be an empty list");
  }
  if (r.kind == RequestKind::kCompletion && r.prompts.size() > static_cast<size_t>(limits.max_prompts)) {
    return FieldError("prompt", absl::StrCat("at most ", limits.max_prompts, " prompts per request, got ",
                                             r.prompts.size(), " (server.max_prompts_per_request)"));
  }
  if (r.kind == RequestKind::kChat) {
    if (r.messages.empty()) return FieldError("messages", "must contain at least one message");
    if (r.messages.size() > static_cast<size_t>(limits.max_messages)) {
      return FieldError("messages", absl::StrCat("at most ", limits.max_messages, " messages, got ",
                                                 r.messages.size(), " (server.max_messages_per_chat)"));
    }
    for (size_t i = 0; i < r.messages.size(); ++i) {
      if (r.messages[i].role.empty()) {
        return FieldError(absl::StrCat("messages[", i, "].role"), "is required");
      }
    }
  }
  if (r.n < 1 || r.n > limits.max_n) {
    return FieldError("n", absl::StrCat("must be in [1, ", limits.max_n, "], got ", r.n));
  }
  if (r.max_tokens && *r.max_tokens < 1) {
    return FieldError("max_tokens", absl::StrCat("must be at least 1, got ", *r.max_tokens));
  }
  if (r.min_tokens < 0) return FieldError("min_tokens", "must be >= 0");
  if (r.max_tokens && r.min_tokens > *r.max_tokens) {
    return FieldError("min_tokens", "must not exceed max_tokens");
  }
  const SamplingParams& s = r.sampling;
  KVS_RETURN_IF_ERROR(CheckRange("temperature", s.temperature, 0.0, 2.0));
  KVS_RETURN_IF_ERROR(CheckRange("top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true));
  if (s.top_k < 0) return FieldError("top_k", absl::StrCat("must be -1 (off) or >= 0, got ", s.top_k));
  KVS_RETURN_IF_ERROR(CheckRange("min_p", s.min_p, 0.0, 1.0));
  KVS_RETURN_IF_ERROR(CheckRange("presence_penalty", s.presence_penalty, -2.0, 2.0));
  KVS_RETURN_IF_ERROR(CheckRange("frequency_penalty", s.frequency_penalty, -2.0, 2.0));
  KVS_RETURN_IF_ERROR(CheckRange("repetition_penalty", s.repetition_penalty, 0.0, 2.0, true));
  if (s.logprobs < 0 || s.logprobs > limits.max_logprobs) {
    return FieldError(r.kind == RequestKind::kChat ? "top_logprobs" : "logprobs",
                      absl::StrCat("must be in [0, ", limits.max_logprobs, "], got ", s.logprobs));
  }
  if (s.logit_bias.size() > static_cast<size_t>(limits.max_logit_bias)) {
    return FieldError("logit_bias", absl::StrCat("at most ", limits.max_logit_bias, " entries, got ",
                                                 s.logit_bias.size(), " (server.max_logit_bias)"));
  }
  if (r.stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return FieldError("stop", absl::StrCat("at most ", limits.max_stop_strings, " stop strings, got ",
                                           r.stop.size(), " (server.max_stop_strings)"));
  }
  for (const auto& stop : r.stop) {
    if (stop.empty()) return FieldError("stop", "stop strings must not be empty");
    if (stop.size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return FieldError("stop", absl::StrCat("a stop string is at most ", limits.max_stop_string_bytes,
                                             " bytes, got ", stop.size(), " (server.max_stop_string_bytes)"));
    }
  }
  if (r.best_of && (*r.best_of < r.n || *r.best_of > limits.max_n)) {
    return FieldError("best_of", absl::StrCat("must be in [n, ", limits.max_n, "], got ",
                                              *r.best_of, " (n = ", r.n, ")"));
  }
  if (r.truncate_prompt_tokens && *r.truncate_prompt_tokens < 1) {
    return FieldError("truncate_prompt_tokens",
                      absl::StrCat("must be >= 1, got ", *r.truncate_prompt_tokens));
  }
  if (s.allowed_token_ids.size() > static_cast<size_t>(kMaxMaskEntries)) {
    return FieldError("allowed_token_ids", absl::StrCat("at most ", kMaxMaskEntries, " ids, got ",
                                                        s.allowed_token_ids.size()));
  }
  if (r.bad_words.size() > static_cast<size_t>(kMaxBadWords)) {
    return FieldError("bad_words",
                      absl::StrCat("at most ", kMaxBadWords, " words, got ", r.bad_words.size()));
  }
  if (r.priority && (*r.priority < INT32_MIN || *r.priority > INT32_MAX)) {
    return FieldError("priority", "must fit in 32 bits");
  }
  const engine::CompressionRequest& c = r.compression;
  if (c.budget && *c.budget < 1) return FieldError("kv_compression.budget", "must be >= 1");
  if (c.ratio) KVS_RETURN_IF_ERROR(CheckRange("kv_compression.ratio", *c.ratio, 0.0, 1.0, true));
  if (c.divide_length && *c.divide_length < 1) {
    return FieldError("kv_compression.divide_length", "must be >= 1");
  }
  if (c.window && *c.window < 0) return FieldError("kv_compression.window", "must be >= 0");
  if (c.sinks && *c.sinks < 0) return FieldError("kv_compression.sinks", "must be >= 0");
  return absl::OkStatus();
}

absl::Status CheckModel(std::string_view model, std::string_view served_model_name) {
  if (model.empty() || model == served_model_name) return absl::OkStatus();
  return ModelNotFound(model);
}

absl::StatusOr<std::string> ResolveModel(const std::string& model, const ModelLimits& limits,
                                         const config::TenantConfig* tenant) {
  if (model.empty() || model == limits.served_model_name) return std::string();
  if (!limits.has_adapter || !limits.has_adapter(model)) return ModelNotFound(model);
  if (tenant != nullptr && !tenant->adapters.empty() &&
      std::find(tenant->adapters.begin(), tenant->adapters.end(), model) ==
          tenant->adapters.end()) {
    return ModelNotFound(model);
  }
  return model;
}

absl::Status CheckTenantPolicy(const config::TenantConfig* tenant,
                               const engine::CompressionRequest& compression) {
  if (tenant == nullptr || !compression.policy || tenant->allowed_policies.empty()) {
    return absl::OkStatus();
  }
  const auto& allowed = tenant->allowed_policies;
  if (std::find(allowed.begin(), allowed.end(), *compression.policy) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "tenant '", tenant->name, "' may not use kv_compression policy '",
      base::AsAbsl(config::Name(*compression.policy)), "'"));
}

absl::StatusOr<std::vector<PreparedPrompt>> BuildRequests(const GenerationRequest& r,
                                                          const config::TenantConfig* tenant,
                                                          const TextCodec& codec,
                                                          const ModelLimits& limits,
                                                          std::string_view request_id) {
  KVS_ASSIGN_OR_RETURN(const std::string adapter, ResolveModel(r.model, limits, tenant));
  KVS_RETURN_IF_ERROR(ValidateGenerationRequest(r, limits.requests));
  KVS_RETURN_IF_ERROR(CheckTenantPolicy(tenant, r.compression));
  KVS_RETURN_IF_ERROR(CheckTokenIds("stop_token_ids", r.stop_token_ids, codec.vocab_size()));
  for (const auto& b : r.sampling.logit_bias) {
    if (b.token < 0 || b.token >= codec.vocab_size()) {
      return FieldError("logit_bias", absl::StrCat("token id ", b.token, " is outside the vocabulary [0, ",
                                                   codec.vocab_size(), ")"));
    }
  }

  KVS_RETURN_IF_ERROR(
      CheckTokenIds("allowed_token_ids", r.sampling.allowed_token_ids, codec.vocab_size()));

  engine::RequestSpec base;
  base.tenant = TenantName(tenant);
  base.lora = adapter;
  base.sampling = r.sampling;
  KVS_ASSIGN_OR_RETURN(base.sampling.bad_words, TokenizeBadWords(r.bad_words, codec));
  if (base.sampling.top_k < 0) base.sampling.top_k = 0;
  // The engine reports logprobs when asked for alternatives; the sampled token's own
  // logprob alone is asked for as one alternative, which the consumer then drops.
  if (r.return_logprobs && base.sampling.logprobs == 0) base.sampling.logprobs = 1;
  // Prompt logprobs: vLLM's prompt_logprobs, and the prompt part of echo with logprobs.
  if (r.prompt_logprobs) base.sampling.prompt_logprobs = static_cast<int>(*r.prompt_logprobs);
  if (r.echo && r.return_logprobs) {
    base.sampling.prompt_logprobs = std::max(base.sampling.prompt_logprobs, r.sampling.logprobs);
  }
  base.min_tokens = static_cast<int>(r.min_tokens);
  base.n = static_cast<int>(r.best_of.value_or(r.n));
  // best_of ranks samples by cumulative logprob: the engine must report the sampled tokens'.
  if (base.n > r.n && base.sampling.logprobs == 0) base.sampling.logprobs = 1;
  base.stop_token_ids = r.stop_token_ids;
  base.ignore_eos = r.ignore_eos;
  base.priority = static_cast<int>(r.priority.value_or(tenant != nullptr ? tenant->priority : 0));
  base.compression = r.compression;
  base.speculative = r.speculative;
  // Prefix-cache isolation: the tenant's group (default: its own name) salts every block
  // hash, so tenants only share cached prefixes when the config says they may.
  if (tenant != nullptr) {
    base.cache_salt = tenant->prefix_cache_group.empty() ? tenant->name : tenant->prefix_cache_group;
    if (!r.cache_salt.empty()) absl::StrAppend(&base.cache_salt, "\x1f", r.cache_salt);
  } else {
    base.cache_salt = r.cache_salt;
  }

  struct Tokenized {
    std::vector<int32_t> ids;
    std::string echo;
    std::string chat_text;  // chat: the rendered prompt
  };
  std::vector<Tokenized> prompts;
  const std::string_view prompt_field = r.kind == RequestKind::kChat ? "messages" : "prompt";
  if (r.kind == RequestKind::kChat) {
    KVS_ASSIGN_OR_RETURN(ChatPrompt chat, codec.EncodeChat(r.messages, r.chat.prompt));
    prompts.push_back({std::move(chat.ids), {}, std::move(chat.text)});
  } else {
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      const PromptInput& p = r.prompts[i];
      Tokenized t;
      if (p.is_token_ids) {
        KVS_RETURN_IF_ERROR(CheckTokenIds("prompt", p.token_ids, codec.vocab_size()));
        t.ids = p.token_ids;
        if (r.echo) t.echo = codec.Decode(t.ids, r.skip_special_tokens);
      } else {
        KVS_ASSIGN_OR_RETURN(t.ids, codec.Encode(p.text, r.add_special_tokens));
        if (r.echo) t.echo = p.text;
      }
      prompts.push_back(std::move(t));
    }
  }

  // truncate_prompt_tokens: keep the last N tokens (vLLM); an echo shows what was kept.
  if (r.truncate_prompt_tokens) {
    for (Tokenized& t : prompts) {
      if (static_cast<int64_t>(t.ids.size()) <= *r.truncate_prompt_tokens) continue;
      t.ids.erase(t.ids.begin(), t.ids.end() - *r.truncate_prompt_tokens);
      if (r.echo) t.echo = codec.Decode(t.ids, r.skip_special_tokens);
    }
  }

  std::vector<PreparedPrompt> out;
  int64_t generated = 0;  // prompts × n × max_tokens, against server.max_generated_tokens_per_request
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].ids.size());
    if (len == 0) return FieldError(prompt_field, "must not be empty");
    if (len >= limits.max_model_len) {
      return FieldError(prompt_field,
                        absl::StrCat("This model's maximum context length is ",
                                     limits.max_model_len, " tokens; the prompt has ", len,
                                     " tokens, which leaves no room for the completion."));
    }
    int64_t max_tokens = r.max_tokens.value_or(r.kind == RequestKind::kChat
                                                   ? limits.max_model_len - len
                                                   : int64_t{16});
    if (len + max_tokens > limits.max_model_len) {
      return FieldError("max_tokens",
                        absl::StrCat("This model's maximum context length is ",
                                     limits.max_model_len, " tokens. However, you requested ",
                                     len + max_tokens, " tokens (", len, " in the prompt, ",
                                     max_tokens, " in the completion)."));
    }
    generated += r.best_of.value_or(r.n) * max_tokens;
    if (generated > limits.requests.max_generated_tokens) {
      return FieldError("max_tokens",
                        absl::StrCat("this request may generate ", generated, "+ tokens (prompts x n x ",
                                     "max_tokens); the server allows ", limits.requests.max_generated_tokens,
                                     " (server.max_generated_tokens_per_request)"));
    }
    PreparedPrompt p;
    p.spec = base;
    p.spec.request_id = prompts.size() == 1 ? std::string(request_id)
                                             : absl::StrCat(base::AsAbsl(request_id), "-", i);
    p.spec.prompt_tokens = std::move(prompts[i].ids);
    p.spec.max_tokens = static_cast<int>(max_tokens);
    p.echo_text = std::move(prompts[i].echo);
    p.chat_prompt_text = std::move(prompts[i].chat_text);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace kvserve::server
