#include "server/openai/openai_response_writer.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::server {
namespace {

using json = nlohmann::ordered_json;

std::string Dump(const json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

json FinishReasonJson(const std::optional<engine::FinishReason>& finish) {
  if (!finish) return nullptr;
  return std::string(engine::Name(*finish));
}

// vLLM's stop_reason: the stop string or stop token id that ended the choice, else null.
json StopReasonJson(const std::optional<std::string>& stop_string,
                    const std::optional<int32_t>& stop_token_id) {
  if (stop_string) return *stop_string;
  if (stop_token_id) return *stop_token_id;
  return nullptr;
}

json CompressionJson(const engine::CompressionSummary& c) {
  json j = {{"policy", c.policy},
            {"budget", c.budget},
            {"rounds", c.rounds},
            {"evicted_tokens", c.evicted_tokens},
            {"evicted_prompt_tokens", c.evicted_prompt_tokens},
            {"peak_kv_tokens", c.peak_kv_tokens},
            {"compression_ratio", c.compression_ratio},
            {"demoted_tokens", c.demoted_tokens},
            {"peak_kv_bytes", c.peak_kv_bytes},
            {"kv_bytes_per_token", c.kv_bytes_per_token},
            {"compressed_layers", c.compressed_layers}};
  if (!c.audit.empty()) {
    json audit = json::array();
    for (const auto& r : c.audit) {
      // The hash is a string: JSON numbers lose precision above 2^53 in JavaScript.
      audit.push_back({{"round", r.round},
                       {"at_token", r.at_token},
                       {"positions", r.positions},
                       {"token_ids_hash", absl::StrCat(absl::Hex(r.token_ids_hash, absl::kZeroPad16))}});
    }
    j["audit"] = std::move(audit);
  }
  return j;
}

// Speculative decoding is reported twice: in OpenAI's own slots for guessed-ahead tokens (the
// Predicted Outputs counts the SDKs type: accepted guesses, rejected guesses; unlike OpenAI's,
// rejected guesses are not billed as completion tokens here) and as kvserve's `speculative`
// object with the guesses verified and accepted (docs/speculative.md).
json UsageJson(const UsageSummary& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.total_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}},
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", u.spec_accepted_tokens},
            {"rejected_prediction_tokens", u.spec_draft_tokens - u.spec_accepted_tokens}}},
          {"speculative",
           {{"draft_tokens", u.spec_draft_tokens}, {"accepted_tokens", u.spec_accepted_tokens}}},
          {"kv_compression", CompressionJson(u.compression)}};
}

json Bytes(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
json CompletionLogprobs(const std::vector<LogprobEntry>& entries, int64_t text_offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& e : entries) {
    tokens.push_back(e.token);
    // Echo with logprobs: the first prompt token has no context, hence no logprob (OpenAI: null).
    if (e.no_logprob) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      lps.push_back(e.logprob);
      json top = json::object();
      for (const auto& t : e.top) top[t.token] = t.logprob;
      tops.push_back(std::move(top));
    }
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(e.token.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: [null, {"<token id>": {"logprob", "rank", "decoded_token"}, ...}, ...]:
// per prompt token its own entry and the top alternatives (rank 1, 2, ...).
json PromptLogprobsJson(const std::vector<LogprobEntry>& entries) {
  json arr = json::array();
  for (const auto& e : entries) {
    if (e.no_logprob) {
      arr.push_back(nullptr);
      continue;
    }
    json m = json::object();
    for (size_t i = 0; i < e.top.size(); ++i) {
      const auto& t = e.top[i];
      m[std::to_string(t.token_id)] = {
          {"logprob", t.logprob}, {"rank", static_cast<int>(i) + 1}, {"decoded_token", t.token}};
    }
    m[std::to_string(e.token_id)] = {
        {"logprob", e.logprob}, {"rank", e.rank}, {"decoded_token", e.token}};
    arr.push_back(std::move(m));
  }
  return arr;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
json ChatLogprobs(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const auto& e : entries) {
    json top = json::array();
    for (const auto& t : e.top) {
      top.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", Bytes(t.token)}});
    }
    content.push_back(
        {{"token", e.token}, {"logprob", e.logprob}, {"bytes", Bytes(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// OpenAI's tool_calls; `with_index` for streaming deltas (each call's position in the choice).
json ToolCallsJson(const std::vector<chat::ToolCall>& calls, bool with_index) {
  json arr = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = json::object();
    if (with_index) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    arr.push_back(std::move(call));
  }
  return arr;
}

// "tool_calls" when the choice called tools (and was not cut off by an error or abort).
// A reply cut by max_tokens stays "length" even with the calls that completed before the cut:
// the client learns it was cut (and the calls it got are whole).
json ChatFinishReasonJson(const std::optional<engine::FinishReason>& finish, bool called_tools) {
  if (finish && called_tools && *finish == engine::FinishReason::kStop) {
    return "tool_calls";
  }
  return FinishReasonJson(finish);
}

bool IsBlank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

json Envelope(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

void AttachUsage(json& j, const UsageSummary* usage, bool usage_null) {
  if (usage != nullptr) {
    j["usage"] = UsageJson(*usage);
  } else if (usage_null) {
    j["usage"] = nullptr;
  }
}

}  // namespace

std::string CompletionResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                   const UsageSummary& usage, bool logprobs) {
  json j = Envelope(meta, "text_completion");
  json arr = json::array();
  for (const auto& c : choices) {
    arr.push_back({{"index", c.index},
                   {"text", c.text},
                   {"logprobs", logprobs ? CompletionLogprobs(c.logprobs, 0) : json(nullptr)},
                   {"finish_reason", FinishReasonJson(c.finish)},
                   {"stop_reason", StopReasonJson(c.stop_string, c.stop_token_id)}});
    if (meta.return_token_ids) arr.back()["token_ids"] = c.token_ids;
    if (!c.prompt_logprobs.empty())
      arr.back()["prompt_logprobs"] = PromptLogprobsJson(c.prompt_logprobs);
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             const UsageSummary& usage, bool logprobs) {
  json j = Envelope(meta, "chat.completion");
  json arr = json::array();
  // vLLM: chat's prompt_logprobs are the request's (one prompt), at the top level.
  for (const auto& c : choices) {
    if (!c.prompt_logprobs.empty()) {
      j["prompt_logprobs"] = PromptLogprobsJson(c.prompt_logprobs);
      break;
    }
  }
  for (const auto& c : choices) {
    json message = {{"role", "assistant"}};
    // With tool calls and nothing else to say, content is null (as OpenAI and vLLM write it).
    message["content"] = !c.tool_calls.empty() && IsBlank(c.text) ? json(nullptr) : json(c.text);
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) message["tool_calls"] = ToolCallsJson(c.tool_calls, false);
    arr.push_back({{"index", c.index},
                   {"message", std::move(message)},
                   {"logprobs", logprobs ? ChatLogprobs(c.logprobs) : json(nullptr)},
                   {"finish_reason", ChatFinishReasonJson(c.finish, !c.tool_calls.empty())},
                   {"stop_reason", StopReasonJson(c.stop_string, c.stop_token_id)}});
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string CompletionChunkJson(const ResponseMeta& meta, const ChoiceDelta& d, bool logprobs,
                                int64_t text_offset, const UsageSummary* usage, bool usage_null) {
  json j = Envelope(meta, "text_completion");
  json choice = {{"index", d.index},
                 {"text", d.text},
                 {"logprobs", logprobs && !d.logprobs.empty() ? CompletionLogprobs(d.logprobs, text_offset)
                                                               : json(nullptr)},
                 {"finish_reason", FinishReasonJson(d.finish)},
                 {"stop_reason", StopReasonJson(d.stop_string, d.stop_token_id)}};
  if (meta.return_token_ids) choice["token_ids"] = d.token_ids;
  j["choices"] = json::array({std::move(choice)});
  AttachUsage(j, usage, usage_null);
  return Dump(j);
}

std::string ChatRoleChunkJson(const ResponseMeta& meta, int index, bool usage_null) {
  json j = Envelope(meta, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  AttachUsage(j, nullptr, usage_null);
  return Dump(j);
}

std::string ChatChunkJson(const ResponseMeta& meta, const ChoiceDelta& d, bool logprobs,
                          const UsageSummary* usage, bool usage_null) {
  json j = Envelope(meta, "chat.completion.chunk");
  json delta = json::object();
  const bool other = !d.reasoning.empty() || !d.tool_calls.empty();
  if (!d.text.empty() || (!d.finish && !other)) delta["content"] = d.text;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty()) delta["tool_calls"] = ToolCallsJson(d.tool_calls, true);
  json choice = {{"index", d.index},
                 {"delta", std::move(delta)},
                 {"logprobs", logprobs && !d.logprobs.empty() ? ChatLogprobs(d.logprobs) : json(nullptr)},
                 {"finish_reason", ChatFinishReasonJson(d.finish, !d.tool_calls.empty())}};
  if (d.finish) choice["stop_reason"] = StopReasonJson(d.stop_string, d.stop_token_id);
  j["choices"] = json::array({std::move(choice)});
  AttachUsage(j, usage, usage_null);
  return Dump(j);
}

std::string UsageChunkJson(const ResponseMeta& meta, bool chat, const UsageSummary& usage) {
  json j = Envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string ErrorJson(const HttpError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(e.status) : json(e.code)}};
  return Dump(json{{"error", std::move(err)}});
}

std::string ModelsJson(const FrontendOptions& o, const std::vector<engine::AdapterCard>& adapters) {
  json card = {{"id", o.model_name},
               {"object", "model"},
               {"created", o.created_unix},
               {"owned_by", "kvserve"},
               {"root", o.model_name},
               {"parent", nullptr},
               {"max_model_len", o.max_model_len},
               {"permission", json::array()}};
  json data = json::array({std::move(card)});
  for (const engine::AdapterCard& a : adapters) {
    data.push_back({{"id", a.name},
                    {"object", "model"},
                    {"created", o.created_unix},
                    {"owned_by", "kvserve"},
                    {"root", a.path},
                    {"parent", o.model_name},
                    {"max_model_len", o.max_model_len},
                    {"permission", json::array()}});
  }
  return Dump(json{{"object", "list"}, {"data", std::move(data)}});
}

std::string TokenizeResponseJson(const TokenizeResult& r) {
  json j = {{"count", r.tokens.size()}, {"max_model_len", r.max_model_len}, {"tokens", r.tokens}};
  if (!r.token_strs.empty()) j["token_strs"] = r.token_strs;
  return Dump(j);
}

std::string DetokenizeResponseJson(std::string_view prompt) {
  return Dump(json{{"prompt", std::string(prompt)}});
}

std::string VersionJson(std::string_view version) {
  return Dump(json{{"version", std::string(version)}});
}

}  // namespace kvserve::server
