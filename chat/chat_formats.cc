#include "chat/chat_formats.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::chat {

absl::StatusOr<ChatFormats> ResolveChatFormats(std::string_view reasoning_parser, ReasoningMarkers markers,
                                               std::string_view tool_call_parser,
                                               std::string_view template_source) {
  ChatFormats f;
  if (markers.start.empty() || markers.end.empty()) {
    return absl::InvalidArgumentError("model.reasoning_start and model.reasoning_end must not be empty");
  }
  if (reasoning_parser == "auto") {
    // A template that knows the end marker writes or strips reasoning blocks (Qwen3, DeepSeek-R1).
    f.reasoning = template_source.find(markers.end) != std::string_view::npos;
  } else if (reasoning_parser == "think") {
    f.reasoning = true;
  } else if (reasoning_parser != "none") {
    return absl::InvalidArgumentError(absl::StrCat("model.reasoning_parser: unknown value \"",
                                                   std::string(reasoning_parser), "\"; allowed: ",
                                                   std::string(kReasoningParserValues)));
  }
  f.markers = std::move(markers);
  if (tool_call_parser == "auto") {
    f.tools = DetectToolCallFormat(template_source);
  } else if (auto format = ParseToolCallFormat(tool_call_parser)) {
    f.tools = *format;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("model.tool_call_parser: unknown value \"",
                                                   std::string(tool_call_parser), "\"; allowed: ",
                                                   std::string(kToolCallParserValues)));
  }
  return f;
}

}  // namespace kvserve::chat
