#include "chat/chat_output_parser.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::chat {
namespace {

bool IsJsonObject(std::string_view text) {
  const auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return j.is_object();
}

}  // namespace

ChatOutputParser::ChatOutputParser(const ChatOutputConfig& config)
    : tools_(MakeToolCallSyntax(config.tools)),
      call_id_prefix_(config.call_id_prefix),
      max_tool_calls_(config.max_tool_calls),
      forced_tool_name_(config.forced_tool_name) {
  in_section_ = !forced_tool_name_.empty();
  if (config.split_reasoning) reasoning_.emplace(config.markers, config.starts_in_reasoning);
}

void ChatOutputParser::Push(std::string_view text, ChatOutputDelta& out) {
  if (!reasoning_) {
    PushContent(text, out);
    return;
  }
  std::string content;
  reasoning_->Push(text, out.reasoning, content);
  PushContent(content, out);
}

void ChatOutputParser::PushContent(std::string_view content, ChatOutputDelta& out) {
  if (in_section_) {
    section_.append(content);
    return;
  }
  if (tools_ == nullptr) {
    out.content.append(content);
    return;
  }
  pending_.append(content);
  size_t hold = 0;
  const size_t at = tools_->FindSection(pending_, !emitted_content_, &hold);
  if (at != std::string::npos) {
    out.content.append(pending_, 0, at);
    section_.assign(pending_, at);
    pending_.clear();
    in_section_ = true;
    return;
  }
  const size_t emit = pending_.size() - hold;
  if (emit == 0) return;
  out.content.append(pending_, 0, emit);
  pending_.erase(0, emit);
  emitted_content_ = true;
}

void ChatOutputParser::Finish(ChatOutputDelta& out) {
  if (reasoning_) {
    std::string content;
    reasoning_->Finish(out.reasoning, content);
    PushContent(content, out);
  }
  out.content += pending_;
  pending_.clear();
  if (!in_section_) return;
  in_section_ = false;
  std::optional<std::vector<ToolCall>> calls;
  if (!forced_tool_name_.empty()) {
    if (IsJsonObject(section_)) calls = std::vector<ToolCall>{{"", forced_tool_name_, section_}};
  } else {
    calls = tools_->Parse(section_);
  }
  if (!calls) {
    out.content += section_;  // not a well-formed call: the client sees what the model wrote
    return;
  }
  for (ToolCall& call : *calls) {
    if (max_tool_calls_ > 0 && calls_ >= max_tool_calls_) break;
    call.id = absl::StrCat(call_id_prefix_, calls_++);
    out.tool_calls.push_back(std::move(call));
  }
}

}  // namespace kvserve::chat
