#include "server/openai/responses_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"
#include "server/openai/openai_json_fields.h"
#include "server/openai/openai_param_support.h"

namespace kvserve::server {
namespace {

using json = OpenAiJson;

// Null, [], {} and a refused row's default ask for nothing (as on the chat path).
bool AsksNothing(const json& value, const RequestField& row) {
  if (value.is_null()) return true;
  if ((value.is_array() || value.is_object()) && value.empty()) return true;
  return !row.accepted_default_json.empty() &&
         value == json::parse(row.accepted_default_json.begin(), row.accepted_default_json.end());
}

absl::Status CheckMembers(const json& body) {
  for (const auto& [key, value] : body.items()) {
    const RequestField* row = FindRequestField(ParamScope::kResponses, key);
    if (row == nullptr) {
      return FieldError(key, "is not a /v1/responses member (docs/api.md lists the accepted ones)");
    }
    if (row->status == FieldStatus::kRefused && !AsksNothing(value, *row)) {
      return FieldError(key, absl::StrCat("is not supported: ", base::AsAbsl(row->text)));
    }
  }
  return absl::OkStatus();
}

// A message's content: a string, or parts input_text / output_text (→ chat text parts).
absl::StatusOr<json> Content(const json& content, const std::string& field) {
  if (content.is_string()) return content;
  if (!content.is_array())
    return TypeError(field, "a string or an array of content parts", content);
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const json& p = content[j];
    const std::string pfield = absl::StrCat(field, "[", j, "]");
    if (!p.is_object()) return TypeError(pfield, "an object", p);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(p, "type", pfield));
    if (type != "input_text" && type != "output_text" && type != "text") {
      return FieldError(Path(pfield, "type"),
                        absl::StrCat("'", type.value_or(""),
                                     "' is not supported (only input_text and output_text: the "
                                     "served model is text-only)"));
    }
    KVS_ASSIGN_OR_RETURN(auto text, GetString(p, "text", pfield));
    if (!text) return FieldError(Path(pfield, "text"), "is required (a string)");
    parts.push_back({{"type", "text"}, {"text", *text}});
  }
  return parts;
}

// Appends the chat messages of `input` (a string or input items) to `messages`.
absl::Status AppendInput(const json& input, json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return absl::OkStatus();
  }
  if (!input.is_array()) return TypeError("input", "a string or an array of input items", input);
  // An earlier turn's reasoning item goes to the assistant message that follows it.
  std::optional<std::string> pending_reasoning;
  // Consecutive function_call items are one assistant turn with several calls.
  bool last_is_call_turn = false;
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string field = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return TypeError(field, "an object (an input item)", item);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(item, "type", field));
    const std::string t = type.value_or("message");
    if (t == "message") {
      KVS_ASSIGN_OR_RETURN(auto role, GetString(item, "role", field));
      if (!role) return FieldError(Path(field, "role"), "is required");
      if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer") {
        return FieldError(
            Path(field, "role"),
            absl::StrCat("'", *role, "' is not a role (user, assistant, system or developer)"));
      }
      const json* content = Member(item, "content");
      if (content == nullptr) return FieldError(Path(field, "content"), "is required");
      KVS_ASSIGN_OR_RETURN(json c, Content(*content, Path(field, "content")));
      json m = {{"role", *role}, {"content", std::move(c)}};
      if (*role == "assistant" && pending_reasoning) {
        m["reasoning_content"] = *std::exchange(pending_reasoning, std::nullopt);
      }
      messages.push_back(std::move(m));
      last_is_call_turn = false;
    } else if (t == "function_call") {
      KVS_ASSIGN_OR_RETURN(auto call_id, GetString(item, "call_id", field));
      KVS_ASSIGN_OR_RETURN(auto name, GetString(item, "name", field));
      KVS_ASSIGN_OR_RETURN(auto arguments, GetString(item, "arguments", field));
      if (!call_id || !name || !arguments) {
        return FieldError(field,
                          "a function_call item needs call_id, name and arguments (strings)");
      }
      json call = {{"id", *call_id},
                   {"type", "function"},
                   {"function", {{"name", *name}, {"arguments", *arguments}}}};
      if (!last_is_call_turn) {
        json m = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}};
        if (pending_reasoning)
          m["reasoning_content"] = *std::exchange(pending_reasoning, std::nullopt);
        messages.push_back(std::move(m));
      }
      messages.back()["tool_calls"].push_back(std::move(call));
      last_is_call_turn = true;
    } else if (t == "function_call_output") {
      KVS_ASSIGN_OR_RETURN(auto call_id, GetString(item, "call_id", field));
      if (!call_id) return FieldError(Path(field, "call_id"), "is required (a string)");
      const json* output = Member(item, "output");
      if (output == nullptr) return FieldError(Path(field, "output"), "is required");
      KVS_ASSIGN_OR_RETURN(json c, Content(*output, Path(field, "output")));
      messages.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", std::move(c)}});
      last_is_call_turn = false;
    } else if (t == "reasoning") {
      std::string text;
      for (const char* key : {"content", "summary"}) {
        const json* parts = Member(item, key);
        if (parts == nullptr) continue;
        if (!parts->is_array()) return TypeError(Path(field, key), "an array", *parts);
        for (const json& p : *parts) {
          if (p.is_object() && p.contains("text") && p["text"].is_string()) {
            if (!text.empty()) text += "\n";
            text += p["text"].get<std::string>();
          }
        }
        if (!text.empty()) break;  // content is the full reasoning; summary only without it
      }
      pending_reasoning = std::move(text);
    } else {
      return FieldError(
          Path(field, "type"),
          absl::StrCat("'", t,
                       "' is not supported (message, function_call, function_call_output "
                       "and reasoning items are)"));
    }
  }
  return absl::OkStatus();
}

// tools[i]: {type: function, name, description?, parameters?, strict?}.
absl::StatusOr<json> Tools(const json& tools) {
  if (!tools.is_array()) return TypeError("tools", "an array", tools);
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string field = absl::StrCat("tools[", i, "]");
    if (!t.is_object()) return TypeError(field, "an object", t);
    KVS_ASSIGN_OR_RETURN(auto type, GetString(t, "type", field));
    if (type.value_or("") != "function") {
      return FieldError(
          Path(field, "type"),
          absl::StrCat("'", type.value_or(""),
                       "' is not supported: only function tools (built-in tools such as "
                       "web_search or file_search are not implemented)"));
    }
    KVS_ASSIGN_OR_RETURN(auto name, GetString(t, "name", field));
    if (!name || name->empty())
      return FieldError(Path(field, "name"), "is required (a non-empty string)");
    json fn = {{"name", *name}};
    KVS_ASSIGN_OR_RETURN(auto description, GetString(t, "description", field));
    if (description) fn["description"] = *description;
    if (const json* params = Member(t, "parameters")) {
      if (!params->is_object())
        return TypeError(Path(field, "parameters"), "an object (a JSON schema)", *params);
      fn["parameters"] = *params;
    }
    // strict: the arguments follow the schema whenever a call is constrained (tool_choice
    // required or named); accepted either way.
    KVS_RETURN_IF_ERROR(GetBool(t, "strict", field).status());
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice: none | auto | required | {type: function, name}.
absl::StatusOr<json> ToolChoice(const json& v) {
  if (v.is_string()) return v;
  if (!v.is_object()) return TypeError("tool_choice", "a string or an object", v);
  KVS_ASSIGN_OR_RETURN(auto type, GetString(v, "type", "tool_choice"));
  if (type.value_or("") != "function") {
    return FieldError("tool_choice.type",
                      "only {type: function, name} is supported (or none, auto, required)");
  }
  KVS_ASSIGN_OR_RETURN(auto name, GetString(v, "name", "tool_choice"));
  if (!name) return FieldError("tool_choice.name", "is required");
  return json{{"type", "function"}, {"function", {{"name", *name}}}};
}

// text: {format: {type: text | json_object | json_schema, name?, schema?, strict?}}.
absl::StatusOr<std::optional<json>> ResponseFormat(const json& text) {
  if (!text.is_object()) return TypeError("text", "an object", text);
  for (const auto& [key, value] : text.items()) {
    if (key == "format") continue;
    if (key == "verbosity" && (value.is_null() || value == "medium")) continue;
    return FieldError(Path("text", key), "is not supported (only text.format)");
  }
  const json* format = Member(text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return TypeError("text.format", "an object", *format);
  KVS_ASSIGN_OR_RETURN(auto type, GetString(*format, "type", "text.format"));
  if (!type) return FieldError("text.format.type", "is required");
  if (*type == "text" || *type == "json_object") return json{{"type", *type}};
  if (*type != "json_schema")
    return FieldError("text.format.type", "must be text, json_object or json_schema");
  const json* schema = Member(*format, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return FieldError("text.format.schema", "is required (a JSON schema object)");
  }
  KVS_ASSIGN_OR_RETURN(auto name, GetString(*format, "name", "text.format"));
  KVS_ASSIGN_OR_RETURN(auto strict, GetBool(*format, "strict", "text.format"));
  json js = {{"name", name.value_or("response")}, {"schema", *schema}};
  if (strict) js["strict"] = *strict;
  return json{{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                       const ConversationLookup& lookup) {
  KVS_ASSIGN_OR_RETURN(json req, ParseObject(body));
  KVS_RETURN_IF_ERROR(CheckMembers(req));
  ResponsesRequest out;
  json chat = json::object();
  json echo = json::object();

  KVS_ASSIGN_OR_RETURN(auto stream, GetBool(req, "stream"));
  out.stream = stream.value_or(false);
  KVS_ASSIGN_OR_RETURN(auto store, GetBool(req, "store"));
  // Without a store (no lookup) nothing is stored unless asked, which the routes refuse.
  out.store = store.value_or(static_cast<bool>(lookup));
  out.store_requested = store.value_or(false);
  KVS_ASSIGN_OR_RETURN(auto previous, GetString(req, "previous_response_id"));

  // The conversation: the previous response's, then this input.
  json conversation = json::array();
  if (previous) {
    std::optional<std::string> stored = lookup ? lookup(*previous) : std::nullopt;
    if (!stored) {
      absl::Status st = absl::NotFoundError(absl::StrCat(
          "previous_response_id: no stored response '", *previous,
          "' (it was not stored, was deleted, or expired: server.responses_store_ttl_seconds)"));
      return st;
    }
    conversation = json::parse(*stored, nullptr, false);
    if (!conversation.is_array()) return absl::InternalError("stored conversation is not an array");
    out.previous_response_id = *previous;
  }
  const json* input = Member(req, "input");
  if (input == nullptr)
    return FieldError("input", "is required (a string or an array of input items)");
  KVS_RETURN_IF_ERROR(AppendInput(*input, conversation));
  if (conversation.empty()) return FieldError("input", "must not be empty");

  json messages = json::array();
  KVS_ASSIGN_OR_RETURN(auto instructions, GetString(req, "instructions"));
  if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const json& m : conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  echo["instructions"] = instructions ? json(*instructions) : json(nullptr);

  KVS_ASSIGN_OR_RETURN(auto model, GetString(req, "model"));
  if (model) chat["model"] = *model;
  KVS_ASSIGN_OR_RETURN(auto max_output, GetInt(req, "max_output_tokens"));
  if (max_output) chat["max_tokens"] = *max_output;
  echo["max_output_tokens"] = max_output ? json(*max_output) : json(nullptr);
  for (const char* key : {"temperature", "top_p"}) {
    KVS_ASSIGN_OR_RETURN(auto v, GetNumber(req, key));
    if (v) chat[key] = *v;
    echo[key] = v ? json(*v) : json(1.0);
  }
  KVS_ASSIGN_OR_RETURN(auto parallel, GetBool(req, "parallel_tool_calls"));
  if (parallel) chat["parallel_tool_calls"] = *parallel;
  echo["parallel_tool_calls"] = parallel.value_or(true);

  echo["tools"] = json::array();
  if (const json* tools = Member(req, "tools")) {
    KVS_ASSIGN_OR_RETURN(json t, Tools(*tools));
    if (!t.empty()) chat["tools"] = std::move(t);
    echo["tools"] = *tools;
  }
  echo["tool_choice"] = "auto";
  if (const json* choice = Member(req, "tool_choice")) {
    KVS_ASSIGN_OR_RETURN(chat["tool_choice"], ToolChoice(*choice));
    echo["tool_choice"] = *choice;
  }
  echo["text"] = {{"format", {{"type", "text"}}}};
  if (const json* text = Member(req, "text")) {
    KVS_ASSIGN_OR_RETURN(std::optional<json> rf, ResponseFormat(*text));
    if (rf) {
      chat["response_format"] = std::move(*rf);
      echo["text"] = *text;
    }
  }
  chat["n"] = 1;

  echo["previous_response_id"] = previous ? json(*previous) : json(nullptr);
  echo["store"] = out.store;
  echo["metadata"] = json::object();
  if (const json* metadata = Member(req, "metadata")) {
    if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
    echo["metadata"] = *metadata;
  }
  for (const char* key : {"user", "safety_identifier", "prompt_cache_key", "service_tier"}) {
    KVS_RETURN_IF_ERROR(GetString(req, key).status());
  }
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  echo["truncation"] = "disabled";

  const auto dump = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  out.chat_body = dump(chat);
  out.conversation_json = dump(conversation);
  out.echo_json = dump(echo);
  return out;
}

absl::Status ToResponsesError(const absl::Status& chat_error) {
  const std::string param = ErrorParam(chat_error);
  if (param.empty()) return chat_error;
  static constexpr std::pair<std::string_view, std::string_view> kRenames[] = {
      {"max_tokens", "max_output_tokens"},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
  };
  // Message indexes do not match input indexes (instructions and earlier turns come first).
  if (std::string_view(param).starts_with("messages")) {
    return FieldError("input", base::AsStd(chat_error.message()));
  }
  for (const auto& [from, to] : kRenames) {
    if (!std::string_view(param).starts_with(from)) continue;
    std::string renamed = absl::StrCat(base::AsAbsl(to), param.substr(from.size()));
    std::string_view message = base::AsStd(chat_error.message());
    if (message.starts_with(param)) message.remove_prefix(param.size());
    if (message.starts_with(": ")) message.remove_prefix(2);
    return FieldError(renamed, message);
  }
  return chat_error;
}

}  // namespace kvserve::server
