// Which reasoning and tool-call formats the served model uses, resolved once at start-up from
// the config (model.reasoning_parser, model.reasoning_start/end, model.tool_call_parser) and the
// model's chat template: `auto` looks for the format's markers in the template's source.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "chat/reasoning_splitter.h"
#include "chat/tool_call_parser.h"

namespace kvserve::chat {

inline constexpr std::string_view kReasoningParserValues = "auto|none|think";
inline constexpr std::string_view kToolCallParserValues = "auto|none|hermes|llama3_json|mistral";

struct ChatFormats {
  bool reasoning = false;  // split <think>...</think> (markers below) into reasoning_content
  ReasoningMarkers markers;
  ToolCallFormat tools = ToolCallFormat::kNone;  // kNone: requests with tool_choice auto are refused
};

// InvalidArgument naming the option for unknown values or empty markers.
absl::StatusOr<ChatFormats> ResolveChatFormats(std::string_view reasoning_parser, ReasoningMarkers markers,
                                               std::string_view tool_call_parser,
                                               std::string_view template_source);

}  // namespace kvserve::chat
