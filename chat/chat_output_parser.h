// One chat choice's output text → content, reasoning_content and tool calls, incrementally (the
// stream consumer feeds each decoded piece; non-streaming responses are the sum of the deltas).
//
//   text ─► ReasoningSplitter ─► reasoning ───────────────────────────────► delta.reasoning
//                    └─────────► content ─► ToolCallSyntax::FindSection ──► delta.content
//                                                  └─ section (buffered) ─► Parse at Finish
//                                                       ├─ ok:  delta.tool_calls (ids assigned)
//                                                       └─ bad: delta.content (as written)
//
// Tool calls are therefore streamed whole, each with its complete `arguments`, in the choice's
// last delta (OpenAI's streaming format allows arguments in one piece).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_splitter.h"
#include "chat/tool_call_parser.h"

namespace kvserve::chat {

struct ChatOutputConfig {
  bool split_reasoning = false;
  ReasoningMarkers markers;
  bool starts_in_reasoning = false;  // the prompt ends inside an open reasoning block
  ToolCallFormat tools = ToolCallFormat::kNone;
  std::string call_id_prefix = "call_";  // tool call k gets id <prefix><k>
  int max_tool_calls = 0;                // 0: all; 1: parallel_tool_calls=false keeps the first
  // A named tool_choice: the whole output is that function's arguments (one call), when it is a
  // JSON object; otherwise it stays content.
  std::string forced_tool_name;
};

struct ChatOutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatOutputConfig& config);

  void Push(std::string_view text, ChatOutputDelta& out);
  void Finish(ChatOutputDelta& out);
  bool tools_called() const { return calls_ > 0; }

 private:
  void PushContent(std::string_view content, ChatOutputDelta& out);

  std::optional<ReasoningSplitter> reasoning_;
  std::unique_ptr<ToolCallSyntax> tools_;
  std::string call_id_prefix_;
  int max_tool_calls_;
  std::string forced_tool_name_;
  std::string pending_;    // content held back: it may begin a tool-call section
  std::string section_;    // the tool-call section so far
  bool in_section_ = false;
  bool emitted_content_ = false;
  int calls_ = 0;
};

}  // namespace kvserve::chat
