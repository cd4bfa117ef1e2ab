// Splits a reasoning model's output into reasoning and content, as vLLM's think-tag reasoning
// parsers (qwen3, deepseek_r1) do, incrementally so that streaming deltas can carry
// `reasoning_content` and `content` separately.
//
//   kStart ──(optional whitespace, then `start` marker)──► kReasoning ──(`end` marker)──► kContent
//     └──────────────(anything else)───────────────────────────────────────────────────────┘
//
// A prompt whose text ends in an open `start` marker (DeepSeek-R1's template writes "<think>\n"
// into the generation prompt; a client may continue a "<think>" message) starts in kReasoning.
// The markers themselves appear in neither output. Bytes that may be the beginning of a marker
// split across tokens are held back until the next Push or Finish decides them.
// Reasoning cut short (no end marker before the output ends) stays reasoning, in streaming and
// non-streaming responses alike.
#pragma once

#include <string>
#include <string_view>

namespace kvserve::chat {

struct ReasoningMarkers {
  std::string start = "<think>";
  std::string end = "</think>";
};

class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningMarkers markers, bool starts_in_reasoning);

  // Appends the decided part of `text` to `reasoning` and `content`.
  void Push(std::string_view text, std::string& reasoning, std::string& content);
  // End of output: whatever is held back goes to the channel it was in.
  void Finish(std::string& reasoning, std::string& content);

  // True when the rendered prompt ends inside an open reasoning block.
  static bool PromptOpensReasoning(std::string_view prompt_text, const ReasoningMarkers& markers);

 private:
  enum class State { kStart, kReasoning, kContent };
  void Drain(std::string& reasoning, std::string& content);

  ReasoningMarkers markers_;
  State state_;
  std::string pending_;  // undecided bytes
};

}  // namespace kvserve::chat
