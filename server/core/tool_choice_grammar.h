// tool_choice → the grammar that enforces it, for both front ends (the OpenAI parser and the
// gRPC converter only decode tools and tool_choice into ChatOptions):
//
//   "none" / "auto"   no grammar (auto: calls are parsed from free text)
//   named function    the output is that function's arguments: its `parameters` schema (any
//                     JSON object without one); the reply is that one call (as vLLM does)
//   "required"        the output is 1..kMaxRequiredToolCalls calls (one with parallel_tool_calls false) in
//                     the served model's tool-call format, each naming a request tool with
//                     arguments valid for its schema (structured/tool_call_grammar.h)
//
// A request that also sets a structured output (response_format, guided_*) cannot use a named
// or required tool_choice: both would constrain the same text.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "chat/tool_call_parser.h"
#include "server/core/generation_request.h"
#include "structured/grammar_spec.h"

namespace kvserve::server {

// nullopt when tool_choice adds no constraint. Errors name tool_choice (no format for
// "required"; combined with a structured output).
absl::StatusOr<std::optional<structured::GrammarSpec>> ToolChoiceGrammar(const GenerationRequest& request,
                                                                         chat::ToolCallFormat format);

}  // namespace kvserve::server
