#include "structured/grammar_spec.h"

#include "absl/strings/str_cat.h"
#include "structured/ebnf_grammar.h"
#include "structured/json_schema.h"
#include "structured/tool_call_grammar.h"

namespace kvserve::structured {

std::string GrammarSpec::Key() const {
  std::string key = absl::StrCat(static_cast<int>(kind), ":", source.size(), ":", source);
  for (const auto& c : choices) absl::StrAppend(&key, "\x1f", c.size(), ":", c);
  return key;
}

absl::StatusOr<RegexNode> ToRegex(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarSpec::Kind::kJsonSchema:
      return JsonSchemaToRegex(spec.source, spec.field);
    case GrammarSpec::Kind::kJsonObject:
      return AnyJsonObject();
    case GrammarSpec::Kind::kRegex: {
      auto r = ParseRegex(spec.source);
      if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(spec.field, ": ", std::string(r.status().message())));
      return r;
    }
    case GrammarSpec::Kind::kGrammar:
      return EbnfToRegex(spec.source, spec.field);
    case GrammarSpec::Kind::kToolCalls:
      return ToolCallsToRegex(spec.source, spec.field);
    case GrammarSpec::Kind::kChoice: {
      if (spec.choices.empty()) return absl::InvalidArgumentError(absl::StrCat(spec.field, ": needs at least one choice"));
      std::vector<RegexNode> alts;
      for (const auto& c : spec.choices) alts.push_back(RegexNode::Literal(c));
      return RegexNode::Alt(std::move(alts));
    }
  }
  return absl::InvalidArgumentError("unknown grammar kind");
}

}  // namespace kvserve::structured
