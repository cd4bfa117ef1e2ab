#include "server/openai/responses_events.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"

namespace kvserve::server {
namespace {

using json = nlohmann::ordered_json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// `event: <type>` and the data line (the SDKs read either).
void AppendEvent(std::string_view type, json fields, int64_t& sequence, std::string& out) {
  json e = {{"type", type}, {"sequence_number", sequence++}};
  for (auto& [k, v] : fields.items()) e[k] = std::move(v);
  absl::StrAppend(&out, "event: ", base::AsAbsl(type), "\ndata: ", Dump(e), "\n\n");
}

}  // namespace

ResponsesEventWriter::ResponsesEventWriter(ResponseHeader header) : header_(std::move(header)) {}

namespace {

// Kind names for ItemJson (Kind's order: reasoning, message, function call).
std::string_view KindName(int kind) {
  return kind == 0 ? "reasoning" : kind == 1 ? "message" : "function_call";
}

// The one content part of a reasoning or message item.
json PartJson(bool reasoning, const std::string& text) {
  if (reasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

json ItemJson(std::string_view kind, const std::string& id, const std::string& text,
              const std::string& call_id, const std::string& name, const std::string& arguments,
              bool done) {
  const char* status = done ? "completed" : "in_progress";
  if (kind == "reasoning") {
    json content = json::array();
    if (done) content.push_back({{"type", "reasoning_text"}, {"text", text}});
    return {{"type", "reasoning"},
            {"id", id},
            {"summary", json::array()},
            {"content", content},
            {"status", status}};
  }
  if (kind == "message") {
    json content = json::array();
    if (done)
      content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
    return {{"type", "message"},
            {"id", id},
            {"status", status},
            {"role", "assistant"},
            {"content", content}};
  }
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", call_id},
          {"name", name},
          {"arguments", done ? arguments : std::string()},
          {"status", status}};
}

}  // namespace

void ResponsesEventWriter::Start(std::string& out) {
  json r = json::parse(ResponseJson("in_progress", nullptr, {}));
  AppendEvent("response.created", {{"response", r}}, sequence_, out);
  AppendEvent("response.in_progress", {{"response", r}}, sequence_, out);
}

void ResponsesEventWriter::Open(Kind kind, std::string* out) {
  CloseOpen(out);
  Item item;
  item.kind = kind;
  const std::string suffix =
      absl::StrCat(header_.id.substr(header_.id.find('_') + 1), "_", next_item_++);
  item.id = absl::StrCat(kind == Kind::kReasoning ? "rs_"
                         : kind == Kind::kMessage ? "msg_"
                                                  : "fc_",
                         suffix);
  items_.push_back(std::move(item));
  open_ = items_.size() - 1;
  if (out == nullptr) return;
  const Item& it = items_.back();
  const int64_t index = static_cast<int64_t>(*open_);
  AppendEvent("response.output_item.added",
              {{"output_index", index},
               {"item", ItemJson(KindName(static_cast<int>(kind)), it.id, "", it.call_id, it.name,
                                 "", false)}},
              sequence_, *out);
  if (kind != Kind::kFunctionCall) {
    AppendEvent("response.content_part.added",
                {{"item_id", it.id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", PartJson(kind == Kind::kReasoning, "")}},
                sequence_, *out);
  }
}

void ResponsesEventWriter::CloseOpen(std::string* out) {
  if (!open_) return;
  Item& it = items_[*open_];
  const int64_t index = static_cast<int64_t>(*open_);
  open_.reset();
  it.done = true;
  if (out == nullptr) return;
  if (it.kind == Kind::kReasoning) {
    AppendEvent(
        "response.reasoning_text.done",
        {{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"text", it.text}},
        sequence_, *out);
    AppendEvent("response.content_part.done",
                {{"item_id", it.id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", PartJson(it.kind == Kind::kReasoning, it.text)}},
                sequence_, *out);
  } else if (it.kind == Kind::kMessage) {
    AppendEvent("response.output_text.done",
                {{"item_id", it.id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", it.text},
                 {"logprobs", json::array()}},
                sequence_, *out);
    AppendEvent(
        "response.content_part.done",
        {{"item_id", it.id},
         {"output_index", index},
         {"content_index", 0},
         {"part", {{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()}}}},
        sequence_, *out);
  } else {
    AppendEvent("response.function_call_arguments.done",
                {{"item_id", it.id},
                 {"output_index", index},
                 {"name", it.name},
                 {"arguments", it.arguments}},
                sequence_, *out);
  }
  AppendEvent("response.output_item.done",
              {{"output_index", index},
               {"item", ItemJson(KindName(static_cast<int>(it.kind)), it.id, it.text, it.call_id,
                                 it.name, it.arguments, true)}},
              sequence_, *out);
}

void ResponsesEventWriter::Add(const ChoiceDelta& delta, std::string* out) {
  if (delta.index != 0) return;  // Responses have one choice (the request asks for n = 1)
  if (!delta.reasoning.empty()) {
    if (!open_ || items_[*open_].kind != Kind::kReasoning) Open(Kind::kReasoning, out);
    Item& it = items_[*open_];
    it.text += delta.reasoning;
    if (out != nullptr) {
      AppendEvent("response.reasoning_text.delta",
                  {{"item_id", it.id},
                   {"output_index", *open_},
                   {"content_index", 0},
                   {"delta", delta.reasoning}},
                  sequence_, *out);
    }
  }
  if (!delta.text.empty()) {
    if (!open_ || items_[*open_].kind != Kind::kMessage) Open(Kind::kMessage, out);
    Item& it = items_[*open_];
    it.text += delta.text;
    if (out != nullptr) {
      AppendEvent("response.output_text.delta",
                  {{"item_id", it.id},
                   {"output_index", *open_},
                   {"content_index", 0},
                   {"delta", delta.text},
                   {"logprobs", json::array()}},
                  sequence_, *out);
    }
  }
  for (const chat::ToolCall& call : delta.tool_calls) {
    Open(Kind::kFunctionCall, out);
    Item& it = items_[*open_];
    it.call_id = call.id;
    it.name = call.name;
    it.arguments = call.arguments;
    if (out != nullptr) {
      // The call arrives whole (the parser sees it once complete): one delta carries it.
      AppendEvent("response.function_call_arguments.delta",
                  {{"item_id", it.id}, {"output_index", *open_}, {"delta", call.arguments}},
                  sequence_, *out);
    }
  }
  if (delta.finish) finish_ = delta.finish;
}

std::string ResponsesEventWriter::Finish(const UsageSummary& usage, std::string* out) {
  const bool any_text_or_call = std::any_of(
      items_.begin(), items_.end(), [](const Item& i) { return i.kind != Kind::kReasoning; });
  if (!any_text_or_call) Open(Kind::kMessage, out);
  CloseOpen(out);
  const bool cut = finish_ == engine::FinishReason::kLength;
  std::string r = ResponseJson(cut ? "incomplete" : "completed", &usage, {});
  if (out != nullptr) {
    AppendEvent(cut ? "response.incomplete" : "response.completed", {{"response", json::parse(r)}},
                sequence_, *out);
  }
  return r;
}

std::string ResponsesEventWriter::Fail(const std::string& message, std::string* out) {
  CloseOpen(out);
  std::string r = ResponseJson("failed", nullptr, message);
  if (out != nullptr)
    AppendEvent("response.failed", {{"response", json::parse(r)}}, sequence_, *out);
  return r;
}

std::string ResponsesEventWriter::ResponseJson(std::string_view status, const UsageSummary* usage,
                                               std::string_view error_message) const {
  json r = {{"id", header_.id},      {"object", "response"}, {"created_at", header_.created_at},
            {"status", status},      {"error", nullptr},     {"incomplete_details", nullptr},
            {"model", header_.model}};
  if (!error_message.empty()) r["error"] = {{"code", "server_error"}, {"message", error_message}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  json output = json::array();
  for (const Item& it : items_) {
    output.push_back(ItemJson(KindName(static_cast<int>(it.kind)), it.id, it.text, it.call_id,
                              it.name, it.arguments, it.done));
  }
  r["output"] = std::move(output);
  const json echo = json::parse(header_.echo_json, nullptr, false);
  if (echo.is_object()) {
    for (const auto& [k, v] : echo.items()) r[k] = v;
  }
  if (usage != nullptr) {
    r["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", usage->cached_prompt_tokens}}},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->total_tokens()}};
  } else {
    r["usage"] = nullptr;
  }
  return Dump(r);
}

std::string ResponsesEventWriter::AssistantMessagesJson() const {
  json m = {{"role", "assistant"}};
  std::string text, reasoning;
  json calls = json::array();
  for (const Item& it : items_) {
    if (it.kind == Kind::kReasoning) reasoning += it.text;
    if (it.kind == Kind::kMessage) text += it.text;
    if (it.kind == Kind::kFunctionCall) {
      calls.push_back({{"id", it.call_id},
                       {"type", "function"},
                       {"function", {{"name", it.name}, {"arguments", it.arguments}}}});
    }
  }
  m["content"] = text;
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  return Dump(json::array({std::move(m)}));
}

}  // namespace kvserve::server
