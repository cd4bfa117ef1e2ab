#include "server/core/tool_choice_grammar.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"
#include "structured/tool_call_grammar.h"

namespace kvserve::server {

absl::StatusOr<std::optional<structured::GrammarSpec>> ToolChoiceGrammar(const GenerationRequest& request,
                                                                         chat::ToolCallFormat format) {
  using Kind = structured::GrammarSpec::Kind;
  const ChatOptions& c = request.chat;
  if (request.kind != RequestKind::kChat || (c.tool_choice != ToolChoice::kNamed && c.tool_choice != ToolChoice::kRequired)) {
    return std::optional<structured::GrammarSpec>();
  }
  if (request.grammar) {
    return FieldError("tool_choice", absl::StrCat("a named or \"required\" tool_choice cannot be combined with ",
                                                  request.grammar->field));
  }
  if (c.tool_choice == ToolChoice::kNamed) {
    for (size_t i = 0; i < c.tool_parameters.size(); ++i) {
      const auto& [name, params] = c.tool_parameters[i];
      if (name != c.tool_choice_name) continue;
      if (params.empty()) return std::optional(structured::GrammarSpec{Kind::kJsonObject, "", {}, "tool_choice"});
      return std::optional(
          structured::GrammarSpec{Kind::kJsonSchema, params, {}, absl::StrCat("tools[", i, "].function.parameters")});
    }
    return FieldError("tool_choice.function.name",
                      absl::StrCat("\"", c.tool_choice_name, "\" is not one of the request's tools"));
  }
  if (format == chat::ToolCallFormat::kNone) {
    return FieldError("tool_choice",
                      "\"required\" needs the model's tool-call format, and none was detected in its chat template; "
                      "set model.tool_call_parser (hermes|llama3_json|mistral) or name the function");
  }
  if (c.tool_parameters.empty()) return FieldError("tool_choice", "needs tools (the request has none)");
  std::vector<structured::ToolSchema> tools;
  for (const auto& [name, params] : c.tool_parameters) tools.push_back({name, params});
  return std::optional(structured::GrammarSpec{
      Kind::kToolCalls, structured::ToolCallsSource(chat::Name(format), tools, c.parallel_tool_calls ? structured::kMaxRequiredToolCalls : 1), {}, "tools"});
}

}  // namespace kvserve::server
