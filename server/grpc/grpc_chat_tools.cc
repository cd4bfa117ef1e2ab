#include "server/grpc/grpc_chat_tools.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {
namespace {

// Ordered, as in the OpenAI parser: the template prints tools and arguments in client order.
using json = nlohmann::ordered_json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::StatusOr<json> ParseObjectText(const std::string& text, const std::string& field) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return FieldError(field, "must be JSON text of an object");
  return j;
}

}  // namespace

absl::StatusOr<std::vector<ChatMessage>> MessagesFromProto(
    const google::protobuf::RepeatedPtrField<v1::ChatMessage>& messages) {
  std::vector<ChatMessage> out;
  for (int i = 0; i < messages.size(); ++i) {
    const v1::ChatMessage& m = messages[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    ChatMessage msg(m.role(), m.content());
    msg.name = m.name();
    if (m.has_reasoning_content()) msg.reasoning_content = m.reasoning_content();
    if (m.role() == "tool") {
      if (m.tool_call_id().empty()) return FieldError(field + ".tool_call_id", "is required for role \"tool\"");
      msg.tool_call_id = m.tool_call_id();
    } else if (!m.tool_call_id().empty()) {
      return FieldError(field + ".tool_call_id", "is only allowed on role \"tool\" messages");
    }
    if (m.tool_calls_size() > 0) {
      if (m.role() != "assistant") return FieldError(field + ".tool_calls", "is only allowed on role \"assistant\" messages");
      json calls = json::array();
      for (int k = 0; k < m.tool_calls_size(); ++k) {
        const v1::ToolCall& c = m.tool_calls(k);
        const std::string cfield = absl::StrCat(field, ".tool_calls[", k, "]");
        if (c.name().empty()) return FieldError(cfield + ".name", "is required");
        json call = {{"id", c.id()}, {"type", "function"}, {"function", {{"name", c.name()}}}};
        if (!c.arguments().empty()) {
          KVS_ASSIGN_OR_RETURN(json args, ParseObjectText(c.arguments(), cfield + ".arguments"));
          call["function"]["arguments"] = std::move(args);
        }
        calls.push_back(std::move(call));
      }
      msg.tool_calls_json = Dump(calls);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

absl::Status ApplyChatTools(const v1::ChatRequest& request, GenerationRequest& r) {
  KVS_ASSIGN_OR_RETURN(r.messages, MessagesFromProto(request.messages()));
  ChatOptions& c = r.chat;
  json tools = json::array();
  std::vector<std::string> names;
  for (int i = 0; i < request.tools_size(); ++i) {
    const v1::Tool& t = request.tools(i);
    const std::string field = absl::StrCat("tools[", i, "]");
    if (t.name().empty()) return FieldError(field + ".name", "is required");
    json fn = {{"name", t.name()}};
    if (!t.description().empty()) fn["description"] = t.description();
    std::string params_text;
    if (!t.parameters().empty()) {
      KVS_ASSIGN_OR_RETURN(json params, ParseObjectText(t.parameters(), field + ".parameters"));
      params_text = Dump(params);
      fn["parameters"] = std::move(params);
    }
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    names.push_back(t.name());
    c.tool_parameters.emplace_back(t.name(), std::move(params_text));
  }
  if (!tools.empty()) c.prompt.tools_json = Dump(tools);

  c.tool_choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (request.has_tool_choice()) {
    const v1::ToolChoice& tc = request.tool_choice();
    switch (tc.kind_case()) {
      case v1::ToolChoice::kMode:
        if (tc.mode() == "none") {
          c.tool_choice = ToolChoice::kNone;
        } else if (tc.mode() == "auto") {
          c.tool_choice = ToolChoice::kAuto;
        } else if (tc.mode() == "required") {
          c.tool_choice = ToolChoice::kRequired;
        } else {
          return FieldError("tool_choice.mode", absl::StrCat("unknown value \"", tc.mode(), "\"; expected none|auto|required"));
        }
        break;
      case v1::ToolChoice::kFunction:
        if (std::find(names.begin(), names.end(), tc.function()) == names.end()) {
          return FieldError("tool_choice.function", absl::StrCat("\"", tc.function(), "\" is not one of the request's tools"));
        }
        c.tool_choice = ToolChoice::kNamed;
        c.tool_choice_name = tc.function();
        break;
      default:
        break;
    }
  }
  if (c.tool_choice != ToolChoice::kNone && names.empty()) {
    return FieldError("tool_choice", "needs tools (the request has none)");
  }
  if (request.has_parallel_tool_calls()) c.parallel_tool_calls = request.parallel_tool_calls();
  return absl::OkStatus();
}

void ToProto(const std::vector<chat::ToolCall>& calls, google::protobuf::RepeatedPtrField<v1::ToolCall>* out) {
  for (const chat::ToolCall& call : calls) {
    v1::ToolCall* c = out->Add();
    c->set_id(call.id);
    c->set_name(call.name);
    c->set_arguments(call.arguments);
  }
}

}  // namespace kvserve::server
