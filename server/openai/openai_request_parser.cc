#include "server/openai/openai_request_parser.h"

#include <algorithm>
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
#include "server/errors/error_mapping.h"
#include "server/openai/openai_json_fields.h"
#include "server/openai/openai_param_support.h"

namespace kvserve::server {
namespace {

using json = OpenAiJson;

absl::StatusOr<config::CompressionPolicyKind> ParsePolicy(const std::string& name,
                                                          std::string_view field) {
  auto p = config::ParseCompressionPolicy(name);
  if (!p) {
    return FieldError(field, absl::StrCat("unknown policy '", name,
                                          "'; expected full|triattention|streamingllm|snapkv|h2o|auto"));
  }
  return *p;
}

absl::StatusOr<config::KvDtype> ParseDtype(const std::string& name, std::string_view field) {
  auto d = config::ParseKvDtype(name);
  if (!d) {
    return FieldError(field, absl::StrCat("unknown KV dtype '", name, "'; expected fp32|fp16|bf16|fp8_e4m3|int8|int4"));
  }
  return *d;
}

// `speculative`: {"method": "none"|"ngram"|"draft", "num_tokens", "ngram_min", "ngram_max"}; every
// member optional (the server's speculative.* fill the rest).
absl::Status ParseSpeculative(const json& body, engine::SpeculativeRequest& s) {
  const json* v = Member(body, "speculative");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return TypeError("speculative", "an object", *v);
  const std::string_view p = "speculative";
  KVS_ASSIGN_OR_RETURN(auto method, GetString(*v, "method", p));
  if (method) {
    if (*method == "none") {
      s.method = config::SpeculativeMethod::kNone;
    } else if (*method == "ngram") {
      s.method = config::SpeculativeMethod::kNgram;
    } else if (*method == "draft") {
      s.method = config::SpeculativeMethod::kDraft;  // the engine refuses it without a draft model
    } else {
      return FieldError("speculative.method",
                        absl::StrCat("unknown method '", *method, "'; expected none|ngram|draft"));
    }
  }
  auto read = [&](std::string_view name, int lo, int hi, std::optional<int>& dst) -> absl::Status {
    KVS_ASSIGN_OR_RETURN(auto x, GetInt(*v, name, p));
    if (!x) return absl::OkStatus();
    if (*x < lo || *x > hi)
      return FieldError(Path(p, name), absl::StrCat("must be in [", lo, ",", hi, "]"));
    dst = static_cast<int>(*x);
    return absl::OkStatus();
  };
  KVS_RETURN_IF_ERROR(read("num_tokens", 1, engine::kMaxDraftTokens, s.num_tokens));
  KVS_RETURN_IF_ERROR(read("ngram_min", 1, engine::kMaxNgram, s.ngram_min));
  KVS_RETURN_IF_ERROR(read("ngram_max", 1, engine::kMaxNgram, s.ngram_max));
  if (s.ngram_min && s.ngram_max && *s.ngram_min > *s.ngram_max) {
    return FieldError("speculative.ngram_min", "must not exceed speculative.ngram_max");
  }
  return absl::OkStatus();
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
    KVS_ASSIGN_OR_RETURN(auto kv_dtype, GetString(*v, "kv_dtype", p));
    KVS_ASSIGN_OR_RETURN(auto k_dtype, GetString(*v, "k_dtype", p));
    KVS_ASSIGN_OR_RETURN(auto v_dtype, GetString(*v, "v_dtype", p));
    if (kv_dtype) {
      KVS_ASSIGN_OR_RETURN(c.k_dtype, ParseDtype(*kv_dtype, "kv_compression.kv_dtype"));
      c.v_dtype = c.k_dtype;
    }
    if (k_dtype) {
      KVS_ASSIGN_OR_RETURN(c.k_dtype, ParseDtype(*k_dtype, "kv_compression.k_dtype"));
    }
    if (v_dtype) {
      KVS_ASSIGN_OR_RETURN(c.v_dtype, ParseDtype(*v_dtype, "kv_compression.v_dtype"));
    }
    // "demote": {"int8": 1024, "int4": 2048, "lowrank": 4096}: tokens per lower-precision tier
    // (issue 18); "lowrank" is the low-rank key tier.
    if (const json* d = Member(*v, "demote")) {
      if (!d->is_object()) return TypeError("kv_compression.demote", "an object of {dtype: tokens}", *d);
      for (auto it = d->begin(); it != d->end(); ++it) {
        const std::string field = absl::StrCat("kv_compression.demote.", it.key());
        KVS_ASSIGN_OR_RETURN(int64_t tokens, AsInt(it.value(), field));
        if (tokens < 0 || tokens > INT32_MAX) return FieldError(field, "must be a token count in [0, 2^31)");
        if (it.key() == "lowrank") {  // the low-rank key tier (cache.lowrank_key_rank)
          c.demote_lowrank = tokens;
          continue;
        }
        KVS_ASSIGN_OR_RETURN(config::KvDtype dtype, ParseDtype(it.key(), field));
        c.demote.emplace_back(dtype, tokens);
      }
    }
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
    return FieldError(Path(prefix, key), absl::StrCat("is not supported: ", base::AsAbsl(m->text)));
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

// vLLM's allowed_token_ids ([int], ids checked against the vocabulary in request_builder) and
// bad_words ([string], tokenized there).
absl::Status ParseVllmMasks(const json& body, GenerationRequest& r) {
  if (const json* ids = Member(body, "allowed_token_ids")) {
    KVS_ASSIGN_OR_RETURN(r.sampling.allowed_token_ids, AsTokenIds(*ids, "allowed_token_ids"));
    if (r.sampling.allowed_token_ids.empty())
      return FieldError("allowed_token_ids", "must not be empty");
  }
  if (const json* words = Member(body, "bad_words")) {
    if (!words->is_array()) return TypeError("bad_words", "an array of strings", *words);
    for (const json& w : *words) {
      if (!w.is_string()) return TypeError("bad_words", "an array of strings", w);
      if (w.get_ref<const std::string&>().empty())
        return FieldError("bad_words", "words must not be empty");
      r.bad_words.push_back(w.get<std::string>());
    }
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
  KVS_RETURN_IF_ERROR(ParseVllmMasks(body, r));
  KVS_RETURN_IF_ERROR(
      ReadOptionalFields(body, {{"ignore_eos", &r.ignore_eos},
                                {"include_stop_str_in_output", &r.include_stop_str_in_output},
                                {"truncate_prompt_tokens", &r.truncate_prompt_tokens},
                                {"priority", &r.priority},
                                {"user", static_cast<std::string*>(nullptr)},  // accepted, not used
                                {"cache_salt", &r.cache_salt},
                                {"request_id", &r.caller_request_id},
                                {"skip_special_tokens", &r.skip_special_tokens}}));
  KVS_RETURN_IF_ERROR(ParseCompression(body, r.compression));
  KVS_RETURN_IF_ERROR(ParseSpeculative(body, r.speculative));

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
  KVS_ASSIGN_OR_RETURN(r.prompt_logprobs, GetInt(body, "prompt_logprobs"));
  if (r.prompt_logprobs) {
    if (*r.prompt_logprobs < 0 || *r.prompt_logprobs > 20)
      return FieldError("prompt_logprobs", "must be in [0, 20]");
    if (out.stream) {
      return FieldError("prompt_logprobs",
                        "is not supported with stream (completions: use echo with logprobs)");
    }
  }
  return absl::OkStatus();
}

// `tool_calls`: [{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}].
// The arguments are parsed into objects for the template, as vLLM does before rendering.
absl::StatusOr<std::string> ParseToolCalls(const json& v, const std::string& field) {
  if (!v.is_array()) return TypeError(field, "an array", v);
  json calls = json::array();
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string cfield = absl::StrCat(field, "[", j, "]");
    const json& call = v[j];
    if (!call.is_object()) return TypeError(cfield, "an object", call);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(call, "type", cfield));
    if (type.value_or("function") != "function") {
      return FieldError(Path(cfield, "type"), "only \"function\" tool calls are supported");
    }
    const json* fn = Member(call, "function");
    if (fn == nullptr || !fn->is_object()) return FieldError(Path(cfield, "function"), "is required (an object)");
    const std::string ffield = Path(cfield, "function");
    KVS_ASSIGN_OR_RETURN(auto name, GetString(*fn, "name", ffield));
    if (!name || name->empty()) return FieldError(Path(ffield, "name"), "is required");
    json out = call;
    if (const json* args = Member(*fn, "arguments")) {
      if (args->is_string()) {
        const std::string& text = args->get_ref<const std::string&>();
        json parsed = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          return FieldError(Path(ffield, "arguments"), "is not valid JSON");
        }
        out["function"]["arguments"] = std::move(parsed);
      } else if (!args->is_object()) {
        return TypeError(Path(ffield, "arguments"), "a JSON string (or an object)", *args);
      }
    }
    calls.push_back(std::move(out));
  }
  return calls.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Members beyond role and content: name, tool_call_id (role tool), tool_calls and
// reasoning_content (assistant).
absl::Status ParseMessageExtras(const json& m, const std::string& field, ChatMessage& msg) {
  KVS_ASSIGN_OR_RETURN(auto name, GetString(m, "name", field));
  if (name) msg.name = *name;
  KVS_ASSIGN_OR_RETURN(auto call_id, GetString(m, "tool_call_id", field));
  if (msg.role == "tool") {
    if (!call_id || call_id->empty()) return FieldError(Path(field, "tool_call_id"), "is required for role \"tool\"");
    msg.tool_call_id = *call_id;
  } else if (call_id) {
    return FieldError(Path(field, "tool_call_id"), "is only allowed on role \"tool\" messages");
  }
  const json* calls = Member(m, "tool_calls");
  if (calls != nullptr && !(calls->is_array() && calls->empty())) {
    if (msg.role != "assistant") {
      return FieldError(Path(field, "tool_calls"), "is only allowed on role \"assistant\" messages");
    }
    KVS_ASSIGN_OR_RETURN(msg.tool_calls_json, ParseToolCalls(*calls, Path(field, "tool_calls")));
  }
  KVS_ASSIGN_OR_RETURN(auto reasoning, GetString(m, "reasoning_content", field));
  if (reasoning) msg.reasoning_content = *reasoning;
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
                        absl::StrCat("unknown role '", *role, "'; expected system|developer|user|assistant|tool"));
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
    KVS_RETURN_IF_ERROR(ParseMessageExtras(m, field, msg));
    messages.push_back(std::move(msg));
  }
  return messages;
}

// add_generation_prompt, continue_final_message, chat_template_kwargs (chat and /tokenize).
absl::Status ParseChatPromptOptions(const json& body, ChatPromptOptions& o) {
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"add_generation_prompt", &o.add_generation_prompt},
                                                {"continue_final_message", &o.continue_final_message}}));
  if (o.continue_final_message && o.add_generation_prompt) {
    // vLLM's rule; add_generation_prompt defaults to true, so it must be turned off explicitly.
    return FieldError("continue_final_message",
                      "cannot be combined with add_generation_prompt=true (set add_generation_prompt to false)");
  }
  if (const json* kw = Member(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return TypeError("chat_template_kwargs", "an object", *kw);
    if (!kw->empty()) o.template_kwargs_json = kw->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return absl::OkStatus();
}

// `tools`: [{"type": "function", "function": {"name", "description"?, "parameters"?}}]; kept as
// the client wrote them (the template prints them).
absl::Status ParseTools(const json& body, ChatPromptOptions& o, std::vector<std::string>& names,
                        std::vector<std::pair<std::string, std::string>>* parameters = nullptr) {
  const json* tools = Member(body, "tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) return TypeError("tools", "an array", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string field = absl::StrCat("tools[", i, "]");
    const json& t = (*tools)[i];
    if (!t.is_object()) return TypeError(field, "an object", t);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(t, "type", field));
    if (type.value_or("") != "function") return FieldError(Path(field, "type"), "must be \"function\"");
    const json* fn = Member(t, "function");
    if (fn == nullptr || !fn->is_object()) return FieldError(Path(field, "function"), "is required (an object)");
    const std::string ffield = Path(field, "function");
    KVS_ASSIGN_OR_RETURN(auto name, GetString(*fn, "name", ffield));
    if (!name || name->empty()) return FieldError(Path(ffield, "name"), "is required");
    KVS_RETURN_IF_ERROR(GetString(*fn, "description", ffield).status());
    const json* params = Member(*fn, "parameters");
    if (params != nullptr && !params->is_object()) {
      return TypeError(Path(ffield, "parameters"), "an object (a JSON schema)", *params);
    }
    names.push_back(*name);
    if (parameters != nullptr) parameters->emplace_back(*name, params == nullptr ? "" : params->dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (!tools->empty()) o.tools_json = tools->dump(-1, ' ', false, json::error_handler_t::replace);
  return absl::OkStatus();
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
absl::Status ParseToolChoice(const json& body, const std::vector<std::string>& tool_names, ChatOptions& c) {
  c.tool_choice = tool_names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  const json* v = Member(body, "tool_choice");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "none") {
      c.tool_choice = ToolChoice::kNone;
    } else if (s == "auto") {
      c.tool_choice = ToolChoice::kAuto;
    } else if (s == "required") {
      c.tool_choice = ToolChoice::kRequired;
    } else {
      return FieldError("tool_choice", absl::StrCat("unknown value \"", s, "\"; expected none|auto|required or a "
                                                    "{\"type\": \"function\", \"function\": {\"name\"}} object"));
    }
  } else if (v->is_object()) {
    const json* fn = Member(*v, "function");
    if (fn == nullptr || !fn->is_object()) return FieldError("tool_choice.function", "is required (an object)");
    KVS_ASSIGN_OR_RETURN(auto name, GetString(*fn, "name", "tool_choice.function"));
    if (!name || name->empty()) return FieldError("tool_choice.function.name", "is required");
    c.tool_choice = ToolChoice::kNamed;
    c.tool_choice_name = *name;
  } else {
    return TypeError("tool_choice", "a string or an object", *v);
  }
  if (c.tool_choice != ToolChoice::kNone && tool_names.empty()) {
    return FieldError("tool_choice", "needs tools (the request has none)");
  }
  if (c.tool_choice == ToolChoice::kNamed &&
      std::find(tool_names.begin(), tool_names.end(), c.tool_choice_name) == tool_names.end()) {
    return FieldError("tool_choice.function.name",
                      absl::StrCat("\"", c.tool_choice_name, "\" is not one of the request's tools"));
  }
  return absl::OkStatus();
}

// Structured outputs: response_format (chat), guided_json, guided_regex, guided_choice,
// guided_grammar; at most one of them.
absl::Status ParseStructuredOutputs(const json& body, bool chat, std::optional<structured::GrammarSpec>& out) {
  using Kind = structured::GrammarSpec::Kind;
  auto set = [&](structured::GrammarSpec spec) -> absl::Status {
    if (out) {
      return FieldError(spec.field, absl::StrCat("cannot be combined with ", out->field,
                                                 " (one of response_format, guided_json, guided_regex, guided_choice, "
                                                 "guided_grammar)"));
    }
    out = std::move(spec);
    return absl::OkStatus();
  };
  if (const json* rf = chat ? Member(body, "response_format") : nullptr) {
    if (!rf->is_object()) return TypeError("response_format", "an object", *rf);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(*rf, "type", "response_format"));
    const std::string t = type.value_or("");
    if (t == "json_object") {
      KVS_RETURN_IF_ERROR(set({Kind::kJsonObject, "", {}, "response_format"}));
    } else if (t == "json_schema") {
      const json* js = Member(*rf, "json_schema");
      if (js == nullptr || !js->is_object()) return FieldError("response_format.json_schema", "is required (an object)");
      const json* schema = Member(*js, "schema");
      if (schema == nullptr || !schema->is_object()) {
        return FieldError("response_format.json_schema.schema", "is required (a JSON schema object)");
      }
      KVS_RETURN_IF_ERROR(set({Kind::kJsonSchema, schema->dump(-1, ' ', false, json::error_handler_t::replace), {}, "response_format.json_schema.schema"}));
    } else if (t != "text") {
      return FieldError("response_format.type", "must be text, json_object or json_schema");
    }
  }
  if (const json* gj = Member(body, "guided_json")) {
    if (gj->is_string()) {
      KVS_RETURN_IF_ERROR(set({Kind::kJsonSchema, gj->get<std::string>(), {}, "guided_json"}));
    } else if (gj->is_object()) {
      KVS_RETURN_IF_ERROR(set({Kind::kJsonSchema, gj->dump(-1, ' ', false, json::error_handler_t::replace), {}, "guided_json"}));
    } else {
      return TypeError("guided_json", "a JSON schema (object or string)", *gj);
    }
  }
  KVS_ASSIGN_OR_RETURN(auto regex, GetString(body, "guided_regex"));
  if (regex) KVS_RETURN_IF_ERROR(set({Kind::kRegex, *regex, {}, "guided_regex"}));
  KVS_ASSIGN_OR_RETURN(auto grammar, GetString(body, "guided_grammar"));
  if (grammar) KVS_RETURN_IF_ERROR(set({Kind::kGrammar, *grammar, {}, "guided_grammar"}));
  if (const json* gc = Member(body, "guided_choice")) {
    if (!gc->is_array() || gc->empty()) return TypeError("guided_choice", "a non-empty array of strings", *gc);
    structured::GrammarSpec spec{Kind::kChoice, "", {}, "guided_choice"};
    for (const json& c : *gc) {
      if (!c.is_string()) return TypeError("guided_choice", "an array of strings", c);
      spec.choices.push_back(c.get<std::string>());
    }
    KVS_RETURN_IF_ERROR(set(std::move(spec)));
  }
  return absl::OkStatus();
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
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"best_of", &r.best_of}}));
  if (r.best_of && *r.best_of > r.n && out.stream) {
    return FieldError(
        "best_of", "cannot be streamed: the best samples are known only at the end (best_of > n)");
  }
  KVS_RETURN_IF_ERROR(ParseStructuredOutputs(body, /*chat=*/false, r.grammar));
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
  KVS_RETURN_IF_ERROR(ParseChatPromptOptions(body, r.chat.prompt));
  std::vector<std::string> tool_names;
  KVS_RETURN_IF_ERROR(ParseTools(body, r.chat.prompt, tool_names, &r.chat.tool_parameters));
  KVS_RETURN_IF_ERROR(ParseToolChoice(body, tool_names, r.chat));
  KVS_RETURN_IF_ERROR(ParseStructuredOutputs(body, /*chat=*/true, r.grammar));
  // A named or "required" tool_choice becomes a grammar in the front end (tool_choice_grammar.h).
  KVS_RETURN_IF_ERROR(ReadOptionalFields(body, {{"parallel_tool_calls", &r.chat.parallel_tool_calls},
                                                {"include_reasoning", &r.chat.include_reasoning}}));
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
                                                {"return_token_strs", &r.return_token_strs}}));
  if (r.use_messages) {
    KVS_RETURN_IF_ERROR(ParseChatPromptOptions(body, r.chat));
    std::vector<std::string> tool_names;
    KVS_RETURN_IF_ERROR(ParseTools(body, r.chat, tool_names));
  }
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
