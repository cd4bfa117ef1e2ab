// Tool calls in the text a model writes, one strategy per model family's format (vLLM's tool
// parsers of the same names):
//
//   hermes       (Hermes, Qwen2.5, Qwen3)  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                                          repeated; content may come before the first one
//   llama3_json  (Llama 3.1-3.3)           {"name": "f", "parameters": {...}} [; {...}]  at the very
//                                          start of the output, optionally after <|python_tag|>
//   mistral      (Mistral instruct)        [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//                                          or [TOOL_CALLS]f[ARGS]{...} (newer tokenizers)
//
// The output is scanned for where a tool-call section begins (content before it is ordinary
// content); the section runs to the end of the output and is parsed once the output is complete.
// A section that does not parse is returned to the caller as content, as vLLM does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::chat {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

std::string_view Name(ToolCallFormat format);
std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name);
// The format a chat template's source writes tool calls in (kNone when it shows none).
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ToolCall {
  std::string id;         // "call_..." (assigned by the output parser)
  std::string name;
  std::string arguments;  // JSON text of an object, as OpenAI's function.arguments
};

class ToolCallSyntax {
 public:
  virtual ~ToolCallSyntax() = default;
  virtual ToolCallFormat format() const = 0;
  // Position in `pending` (content not yet emitted; `at_output_start`: nothing was emitted before
  // it) where a tool-call section begins, or npos. With npos, `*hold` is set to how many trailing
  // bytes of `pending` may still turn out to begin one (the caller keeps them back).
  virtual size_t FindSection(std::string_view pending, bool at_output_start, size_t* hold) const = 0;
  // The calls in a complete section (from where FindSection pointed to the end of the output),
  // ids empty; nullopt when it is not a well-formed list of at least one call.
  virtual std::optional<std::vector<ToolCall>> Parse(std::string_view section) const = 0;
};

// nullptr for kNone.
std::unique_ptr<ToolCallSyntax> MakeToolCallSyntax(ToolCallFormat format);

}  // namespace kvserve::chat
