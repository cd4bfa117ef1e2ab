// What a request constrains its output to, as both front ends decode it: OpenAI's
// response_format (json_object, json_schema), vLLM's guided_json / guided_regex /
// guided_choice / guided_grammar, and tool_choice "required" (tool_call_grammar.h). A value
// type; the grammar cache compiles it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

struct GrammarSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kToolCalls };
  Kind kind = Kind::kJsonObject;
  std::string source;                // the schema (JSON text), regex, EBNF grammar or tool-calls spec
  std::vector<std::string> choices;  // kChoice
  std::string field;                 // the request member it came from (error messages)

  // The cache key: kind and source.
  std::string Key() const;
};

// The spec as a regular language over bytes; InvalidArgument naming `field` and what is not
// supported.
absl::StatusOr<RegexNode> ToRegex(const GrammarSpec& spec);

}  // namespace kvserve::structured
