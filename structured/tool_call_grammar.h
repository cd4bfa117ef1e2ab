// tool_choice "required" as a regular language: the whole output is one or more tool calls in
// the served model's tool-call format, each naming one of the request's tools with arguments
// that validate against that tool's `parameters` schema (json_schema.h's canonical layout):
//
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   joined by "\n"
//   llama3_json  {"name": "f", "parameters": {...}}                            joined by "; "
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//
// These are exactly the layouts chat/tool_call_parser.h reads back, so every output the grammar
// lets through parses as at least one call. The spec travels as JSON text (GrammarSpec.source,
// so that the grammar cache keys on it):
//   {"format": "hermes", "max_calls": 1, "tools": [{"name": "f", "parameters": {...}}, ...]}
// max_calls 0: any number of calls; a tool without parameters takes any JSON object.
//
// tool_choice "required" with parallel_tool_calls uses kMaxRequiredToolCalls: an unbounded list
// lets a weak model repeat calls until max_tokens cuts the last one off (and a cut-off section
// is returned as content), so the grammar ends the output after that many calls (unless that
// automaton would exceed ByteDfa's state limit: then the list is unbounded).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

inline constexpr int kMaxRequiredToolCalls = 4;

struct ToolSchema {
  std::string name;
  std::string parameters_json;  // "" when the tool has no parameters schema
};

// The GrammarSpec source for the tools above; `format`: hermes | llama3_json | mistral.
std::string ToolCallsSource(std::string_view format, const std::vector<ToolSchema>& tools, int max_calls);

// `field` prefixes error paths: "<field>[i].function.parameters...: why".
absl::StatusOr<RegexNode> ToolCallsToRegex(std::string_view source, std::string_view field);

}  // namespace kvserve::structured
