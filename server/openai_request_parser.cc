#include "server/openai_request_parser.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <variant>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "config/fields.h"
#include "server/error_mapping.h"
#include "server/openai_param_support.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

std::string Path(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : absl::StrCat(base::AsAbsl(prefix), ".", base::AsAbsl(key));
}

absl::Status TypeError(std::string_view field, std::string_view expected, const json& got) {
  return FieldError(field, absl::StrCat("expected ", base::AsAbsl(expected), ", got ",
                                        got.type_name()));
}

// A present, non-null member, or nullptr.
const json* Member(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<json> ParseObject(std::string_view body) {
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!doc.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  return doc;
}

// Integers: JSON integers, or numbers with an integral value (some clients send 16.0).
absl::StatusOr<int64_t> AsInt(const json& v, std::string_view field) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(field, "integer out of range");
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return TypeError(field, "an integer", v);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const json& obj, std::string_view key,
                                              std::string_view prefix = {}) {
  const json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  KVS_ASSIGN_OR_RETURN(int64_t i, AsInt(*v, Path(prefix, key)));
  return i;
}

absl::StatusOr<std::optional<double>> GetNumber(const json& obj, std::string_view key,
                                                std::string_view prefix = {}) {
  const json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return TypeError(Path(prefix, key), "a number", *v);
  return v->get<double>();
}

absl::StatusOr<std::optional<bool>> GetBool(const json& obj, std::string_view key,
                                            std::string_view prefix = {}) {
  const json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return TypeError(Path(prefix, key), "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> GetString(const json& obj, std::string_view key,
                                                     std::string_view prefix = {}) {
  const json* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return TypeError(Path(prefix, key), "a string", *v);
  return v->get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> AsTokenIds(const json& v, std::string_view field) {
  if (!v.is_array()) return TypeError(field, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) return TypeError(field, "an array of integers", e);
    int64_t id = e.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      return FieldError(field, absl::StrCat("token id ", id, " out of range"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// A table entry for an optional member copied through when present; an absent member leaves
// the destination's default. The typed getter does the reading, so a wrong type fails with
// the getter's message. A null std::string* type-checks the member and drops it.
struct OptionalField {
  std::string_view key;
  std::variant<bool*, int64_t*, std::optional<int64_t>*, float*, std::string*> dst;
};

// Reads `fields` in order (the first bad one is the error reported).
absl::Status ReadOptionalFields(const json& obj, std::initializer_list<OptionalField> fields) {
  for (const OptionalField& f : fields) {
    if (bool* const* b = std::get_if<bool*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetBool(obj, f.key));
      if (v) **b = *v;
    } else if (std::string* const* str = std::get_if<std::string*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetString(obj, f.key));
      if (v && *str != nullptr) **str = *std::move(v);
    } else if (float* const* x = std::get_if<float*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetNumber(obj, f.key));
      if (v) **x = static_cast<float>(*v);
    } else {
      KVS_ASSIGN_OR_RETURN(auto v, GetInt(obj, f.key));
      if (!v) continue;
      if (int64_t* const* i = std::get_if<int64_t*>(&f.dst)) {
        **i = *v;
      } else {
        *std::get<std::optional<int64_t>*>(f.dst) = *v;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<config::CompressionPolicyKind> ParsePolicy(const std::string& name,
                                                          std::string_view field) {
  auto p = config::ParseCompressionPolicy(name);
  if (!p) {
    return FieldError(field, absl::StrCat("unknown policy '", name,
                                          "'; expected full|triattention|streamingllm|snapkv|h2o|auto"));
  }
  return *p;
}

// `kv_compression`: an object, or just the policy name as a string.
absl::Status ParseCompression(const json& body, engine::CompressionRequest& c) {
  if (const json* v = Member(body, "kv_compression")) {
    if (v->is_string()) {
      KVS_ASSIGN_OR_RETURN(c.policy, ParsePolicy(v->get<std::string>(), "kv_compression"));
      return absl::OkStatus();
    }
    if (!v->is_object()) return TypeError("kv_compression", "an object", *v);
    const std::string_view p = "kv_compression";
    KVS_ASSIGN_OR_RETURN(auto policy, GetString(*v, "policy", p));
    if (policy) {
      KVS_ASSIGN_OR_RETURN(c.policy, ParsePolicy(*policy, "kv_compression.policy"));
    }
    KVS_ASSIGN_OR_RETURN(auto budget, GetInt(*v, "budget", p));
    KVS_ASSIGN_OR_RETURN(auto ratio, GetNumber(*v, "ratio", p));
    KVS_ASSIGN_OR_RETURN(auto divide, GetInt(*v, "divide_length", p));
    KVS_ASSIGN_OR_RETURN(auto window, GetInt(*v, "window", p));
    KVS_ASSIGN_OR_RETURN(auto sinks, GetInt(*v, "sinks", p));
    KVS_ASSIGN_OR_RETURN(auto protect, GetBool(*v, "protect_prompt", p));
    KVS_ASSIGN_OR_RETURN(auto audit, GetBool(*v, "audit", p));
    auto check32 = [&](std::string_view name, const std::optional<int64_t>& val) {
      return val && (*val < INT32_MIN || *val > INT32_MAX) ? FieldError(Path(p, name), "out of range")
                                                           : absl::OkStatus();
    };
    KVS_RETURN_IF_ERROR(check32("budget", budget));
    KVS_RETURN_IF_ERROR(check32("divide_length", divide));
    KVS_RETURN_IF_ERROR(check32("window", window));
    KVS_RETURN_IF_ERROR(check32("sinks", sinks));
    if (budget) c.budget = static_cast<int>(*budget);
    if (ratio) c.ratio = *ratio;
    if (divide) c.divide_length = static_cast<int>(*divide);
    if (window) c.window = static_cast<int>(*window);
    if (sinks) c.sinks = static_cast<int>(*sinks);
    if (protect) c.protect_prompt = *protect;
    if (audit) c.audit = *audit;
    return absl::OkStatus();
  }
  // vLLM's extension channel: {"vllm_xargs": {"kv_compression": "triattention", "kv_budget": 2048}}.
  if (const json* x = Member(body, "vllm_xargs"); x != nullptr && x->is_object()) {
    KVS_ASSIGN_OR_RETURN(auto policy, GetString(*x, "kv_compression", "vllm_xargs"));
    if (policy) {
      KVS_ASSIGN_OR_RETURN(c.policy, ParsePolicy(*policy, "vllm_xargs.kv_compression"));
    }
    KVS_ASSIGN_OR_RETURN(auto budget, GetInt(*x, "kv_budget", "vllm_xargs"));
    if (budget) {
      if (*budget > INT32_MAX) return FieldError("vllm_xargs.kv_budget", "out of range");
      c.budget = static_cast<int>(*budget);
    }
  }
  return absl::OkStatus();
}

// A member of openai_param_support's table with a value that asks for something: a 400 naming
// it. Null, empty arrays/objects and the member's default are accepted (see the table).
absl::Status RefuseUnsupported(const json& obj, ParamScope scope, std::string_view prefix = {}) {
  for (const auto& [key, value] : obj.items()) {
    const RefusedMember* m = FindRefusedMember(scope, key);
    if (m == nullptr || value.is_null()) continue;
    if ((value.is_array() || value.is_object()) && value.empty()) continue;
    if (!m->accepted_default_json.empty() &&
        value == json::parse(m->accepted_default_json.begin(), m->accepted_default_json.end())) {
      continue;
    }
    return FieldError(Path(prefix, key), absl::StrCat("is not supported: ", base::AsAbsl(m->reason)));
  }
  return absl::OkStatus();
}

// `logit_bias`: {"<token id>": bias}, bias in [-100, 100]; ids are checked against the
// vocabulary in request_builder (the parser does not know it).
absl::Status ParseLogitBias(const json& body, SamplingParams& s) {
  const json* v = Member(body, "logit_bias");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return TypeError("logit_bias", "an object mapping token ids to biases", *v);
  if (v->size() > static_cast<size_t>(scheduler::kMaxLogitBias)) {
    return FieldError("logit_bias", absl::StrCat("at most ", scheduler::kMaxLogitBias, " entries, got ",
                                                 v->size()));
  }
  s.logit_bias.clear();
  s.logit_bias.reserve(v->size());
  for (const auto& [key, bias] : v->items()) {
    const std::string field = absl::StrCat("logit_bias.", key);
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return FieldError("logit_bias", absl::StrCat("keys must be token ids, got \"", key, "\""));
    }
    if (!bias.is_number()) return TypeError(field, "a number", bias);
    const double b = bias.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) return FieldError(field, absl::StrCat("must be in [-100, 100], got ", b));
    s.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(b)});
  }
  return absl::OkStatus();
}

// Fields shared by completions and chat.
absl::Status ParseCommon(const json& body, HttpGenerationRequest& out) {
  GenerationRequest& r = out.request;
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"model", &r.model},
                                                {"max_tokens", &r.max_tokens},
                                                {"min_tokens", &r.min_tokens},
                                                {"n", &r.n}}));

  SamplingParams& s = r.sampling;
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"temperature", &s.temperature}, {"top_p", &s.top_p}}));
  KVS_ASSIGN_OR_RETURN(auto top_k, GetInt(body, "top_k"));
  if (top_k) {
    if (*top_k < -1 || *top_k > INT32_MAX) return FieldError("top_k", "must be -1 (off) or >= 0");
    s.top_k = *top_k < 0 ? 0 : static_cast<int>(*top_k);
  }
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"min_p", &s.min_p},
                                                {"presence_penalty", &s.presence_penalty},
                                                {"frequency_penalty", &s.frequency_penalty},
                                                {"repetition_penalty", &s.repetition_penalty}}));
  KVS_RETURN_IF_ERROR(ParseLogitBias(body, s));
  if (const json* seed = Member(body, "seed")) {
    if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      s.seed = static_cast<uint64_t>(seed->get<int64_t>());  // negative seeds: two's complement
    } else {
      return TypeError("seed", "an integer", *seed);
    }
  }

  if (const json* stop = Member(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& e : *stop) {
        if (!e.is_string()) return TypeError("stop", "a string or an array of strings", e);
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      return TypeError("stop", "a string or an array of strings", *stop);
    }
  }
  if (const json* ids = Member(body, "stop_token_ids")) {
    KVS_ASSIGN_OR_RETURN(r.stop_token_ids, AsTokenIds(*ids, "stop_token_ids"));
  }
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"ignore_eos", &r.ignore_eos},
                                                {"priority", &r.priority},
                                                {"user", static_cast<std::string*>(nullptr)},  // accepted, not used
                                                {"cache_salt", &r.cache_salt},
                                                {"request_id", &r.caller_request_id},
                                                {"skip_special_tokens", &r.skip_special_tokens}}));
  KVS_RETURN_IF_ERROR(ParseCompression(body, r.compression));

  KVS_ASSIGN_OR_RETURN(auto timeout, GetNumber(body, "timeout"));
  if (timeout) {
    if (!(*timeout > 0.0 && *timeout <= 86400.0)) {
      return FieldError("timeout", "must be a number of seconds in (0, 86400]");
    }
    out.timeout_seconds = *timeout;
  }
  KVS_ASSIGN_OR_RETURN(auto stream, GetBool(body, "stream"));
  out.stream = stream.value_or(false);
  if (const json* so = Member(body, "stream_options")) {
    if (!so->is_object()) return TypeError("stream_options", "an object", *so);
    if (!out.stream) return FieldError("stream_options", "is only allowed when stream is true");
    KVS_ASSIGN_OR_RETURN(auto include_usage, GetBool(*so, "include_usage", "stream_options"));
    KVS_ASSIGN_OR_RETURN(auto continuous, GetBool(*so, "continuous_usage_stats", "stream_options"));
    out.include_usage = include_usage.value_or(false);
    out.continuous_usage = continuous.value_or(false);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const json& v) {
  if (!v.is_array()) return TypeError("messages", "an array", v);
  if (v.empty()) return FieldError("messages", "must contain at least one message");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return TypeError(field, "an object", m);
    ChatMessage msg;
    KVS_ASSIGN_OR_RETURN(auto role, GetString(m, "role", field));
    if (!role) return FieldError(Path(field, "role"), "is required");
    if (const RefusedRole* refused = FindRefusedRole(*role)) {
      return FieldError(Path(field, "role"),
                        absl::StrCat("'", *role, "' is not supported: ", base::AsAbsl(refused->reason)));
    }
    if (!IsSupportedRole(*role)) {
      return FieldError(Path(field, "role"),
                        absl::StrCat("unknown role '", *role, "'; expected system|developer|user|assistant"));
    }
    KVS_RETURN_IF_ERROR(RefuseUnsupported(m, ParamScope::kMessage, field));
    // OpenAI's "developer" messages are system messages for the templates kvserve renders.
    msg.role = *role == "developer" ? "system" : *role;
    if (const json* c = Member(m, "content")) {
      if (c->is_string()) {
        msg.content = c->get<std::string>();
      } else if (c->is_array()) {
        // Content parts: only text; parts are joined with newlines as vLLM does.
        for (size_t j = 0; j < c->size(); ++j) {
          const json& part = (*c)[j];
          const std::string pfield = absl::StrCat(field, ".content[", j, "]");
          if (!part.is_object()) return TypeError(pfield, "an object", part);
          KVS_ASSIGN_OR_RETURN(auto type, GetString(part, "type", pfield));
          if (type.value_or("text") != "text") {
            return FieldError(Path(pfield, "type"), absl::StrCat("content type '", *type,
                                                                 "' is not supported (only 'text')"));
          }
          KVS_ASSIGN_OR_RETURN(auto text, GetString(part, "text", pfield));
          if (!msg.content.empty()) msg.content += "\n";
          msg.content += text.value_or("");
        }
      } else {
        return TypeError(Path(field, "content"), "a string or an array of content parts", *c);
      }
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

}  // namespace

absl::StatusOr<HttpGenerationRequest> ParseCompletionRequest(std::string_view text) {
  KVS_ASSIGN_OR_RETURN(json body, ParseObject(text));
  HttpGenerationRequest out;
  GenerationRequest& r = out.request;
  r.kind = RequestKind::kCompletion;
  const json* prompt = Member(body, "prompt");
  if (prompt == nullptr) return FieldError("prompt", "is required");
  KVS_RETURN_IF_ERROR(RefuseUnsupported(body, ParamScope::kCompletion));
  if (prompt->is_string()) {
    r.prompts.push_back(PromptInput{prompt->get<std::string>(), {}, false});
  } else if (prompt->is_array()) {
    if (prompt->empty()) return FieldError("prompt", "must not be an empty list");
    const json& first = prompt->front();
    if (first.is_number_integer()) {
      KVS_ASSIGN_OR_RETURN(auto ids, AsTokenIds(*prompt, "prompt"));
      r.prompts.push_back(PromptInput{{}, std::move(ids), true});
    } else {
      for (const json& e : *prompt) {
        if (e.is_string()) {
          r.prompts.push_back(PromptInput{e.get<std::string>(), {}, false});
        } else if (e.is_array()) {
          KVS_ASSIGN_OR_RETURN(auto ids, AsTokenIds(e, "prompt"));
          r.prompts.push_back(PromptInput{{}, std::move(ids), true});
        } else {
          return TypeError("prompt", "a string, an array of strings or token ids", e);
        }
      }
    }
  } else {
    return TypeError("prompt", "a string, an array of strings or token ids", *prompt);
  }
  KVS_RETURN_IF_ERROR(ParseCommon(body, out));
  KVS_RETURN_IF_ERROR(
      ReadOptionalFields(body, {{"echo", &r.echo},
                                {"add_special_tokens", &r.add_special_tokens},
                                {"return_token_ids", &out.return_token_ids}}));
  KVS_ASSIGN_OR_RETURN(auto logprobs, GetInt(body, "logprobs"));
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > 20) return FieldError("logprobs", "must be in [0, 20]");
    r.sampling.logprobs = static_cast<int>(*logprobs);
    r.return_logprobs = true;
  }
  KVS_ASSIGN_OR_RETURN(auto suffix, GetString(body, "suffix"));
  if (suffix && !suffix->empty()) return FieldError("suffix", "is not supported");
  return out;
}

absl::StatusOr<HttpGenerationRequest> ParseChatRequest(std::string_view text) {
  KVS_ASSIGN_OR_RETURN(json body, ParseObject(text));
  HttpGenerationRequest out;
  GenerationRequest& r = out.request;
  r.kind = RequestKind::kChat;
  const json* messages = Member(body, "messages");
  if (messages == nullptr) return FieldError("messages", "is required");
  KVS_RETURN_IF_ERROR(RefuseUnsupported(body, ParamScope::kChat));
  KVS_ASSIGN_OR_RETURN(r.messages, ParseMessages(*messages));
  KVS_RETURN_IF_ERROR(ParseCommon(body, out));
  // max_completion_tokens is OpenAI's current name; max_tokens is its deprecated alias.
  KVS_ASSIGN_OR_RETURN(auto max_completion, GetInt(body, "max_completion_tokens"));
  if (max_completion) {
    if (*max_completion < 1) return FieldError("max_completion_tokens", "must be at least 1");
    r.max_tokens = *max_completion;
  }
  KVS_ASSIGN_OR_RETURN(auto logprobs, GetBool(body, "logprobs"));
  KVS_ASSIGN_OR_RETURN(auto top_logprobs, GetInt(body, "top_logprobs"));
  if (top_logprobs) {
    if (*top_logprobs < 0 || *top_logprobs > 20) return FieldError("top_logprobs", "must be in [0, 20]");
    if (!logprobs.value_or(false)) return FieldError("top_logprobs", "requires logprobs to be true");
    r.sampling.logprobs = static_cast<int>(*top_logprobs);
  }
  r.return_logprobs = logprobs.value_or(false);
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"add_generation_prompt", &r.add_generation_prompt}}));
  return out;
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view text) {
  KVS_ASSIGN_OR_RETURN(json body, ParseObject(text));
  TokenizeRequest r;
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"model", &r.model}}));
  if (const json* messages = Member(body, "messages")) {
    r.use_messages = true;
    KVS_ASSIGN_OR_RETURN(r.messages, ParseMessages(*messages));
  } else {
    KVS_ASSIGN_OR_RETURN(auto prompt, GetString(body, "prompt"));
    if (!prompt) return FieldError("prompt", "is required (or messages)");
    r.prompt = *prompt;
  }
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"add_special_tokens", &r.add_special_tokens},
                                                {"add_generation_prompt", &r.add_generation_prompt},
                                                {"return_token_strs", &r.return_token_strs}}));
  return r;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view text) {
  KVS_ASSIGN_OR_RETURN(json body, ParseObject(text));
  DetokenizeRequest r;
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"model", &r.model}}));
  const json* tokens = Member(body, "tokens");
  if (tokens == nullptr) return FieldError("tokens", "is required");
  KVS_ASSIGN_OR_RETURN(r.tokens, AsTokenIds(*tokens, "tokens"));
  return r;
}

}  // namespace kvserve::server
