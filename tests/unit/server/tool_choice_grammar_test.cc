#include "server/core/tool_choice_grammar.h"

#include <gtest/gtest.h>

#include "server/errors/error_mapping.h"
#include "server/openai/openai_request_parser.h"
#include "structured/byte_dfa.h"
#include "structured/grammar_spec.h"
#include "structured/tool_call_grammar.h"

namespace kvserve::server {
namespace {

using structured::GrammarSpec;

GenerationRequest Parse(const std::string& extra) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], )"
                            R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                                {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                                 "required": ["city"]}}},
                               {"type": "function", "function": {"name": "now"}}])" +
                            extra + "}");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->request : GenerationRequest{};
}

structured::ByteDfa Dfa(const GrammarSpec& spec) {
  auto regex = structured::ToRegex(spec);
  EXPECT_TRUE(regex.ok()) << regex.status();
  auto dfa = structured::ByteDfa::Compile(regex.ok() ? *regex : structured::RegexNode::Empty());
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  return *std::move(dfa);
}

TEST(ToolChoiceGrammar, AutoAndNoneAddNothing) {
  for (const char* choice : {"", R"(, "tool_choice": "auto")", R"(, "tool_choice": "none")"}) {
    auto g = ToolChoiceGrammar(Parse(choice), chat::ToolCallFormat::kHermes);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_FALSE(g->has_value()) << choice;
  }
}

TEST(ToolChoiceGrammar, NamedIsThatToolsArguments) {
  auto g = ToolChoiceGrammar(Parse(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"),
                             chat::ToolCallFormat::kNone);
  ASSERT_TRUE(g.ok() && g->has_value()) << g.status();
  EXPECT_EQ((*g)->kind, GrammarSpec::Kind::kJsonSchema);
  EXPECT_EQ((*g)->field, "tools[0].function.parameters");
  const auto dfa = Dfa(**g);
  EXPECT_TRUE(dfa.Matches(R"({"city": "Paris"})"));
  EXPECT_FALSE(dfa.Matches(R"({})"));  // city is required
  EXPECT_FALSE(dfa.Matches(R"({"city": "Paris, France"})"));
  // A tool without parameters takes any JSON object.
  auto any = ToolChoiceGrammar(Parse(R"(, "tool_choice": {"type": "function", "function": {"name": "now"}})"),
                               chat::ToolCallFormat::kNone);
  ASSERT_TRUE(any.ok() && any->has_value());
  EXPECT_EQ((*any)->kind, GrammarSpec::Kind::kJsonObject);
}

TEST(ToolChoiceGrammar, RequiredIsOneOrMoreCallsInTheModelsFormat) {
  auto g = ToolChoiceGrammar(Parse(R"(, "tool_choice": "required")"), chat::ToolCallFormat::kHermes);
  ASSERT_TRUE(g.ok() && g->has_value()) << g.status();
  EXPECT_EQ((*g)->kind, GrammarSpec::Kind::kToolCalls);
  const auto hermes = Dfa(**g);
  const std::string paris = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(hermes.Matches(paris));
  EXPECT_TRUE(hermes.Matches(paris + "\n" + now));  // parallel calls by default
  // Up to kMaxRequiredToolCalls of them; `now` takes any JSON object, whose automaton is too big
  // to copy that often, so with it the list is unbounded (the documented fallback).
  std::string calls = paris;
  for (int i = 1; i < structured::kMaxRequiredToolCalls; ++i) calls += "\n" + paris;
  EXPECT_TRUE(hermes.Matches(calls + "\n" + now));
  auto small = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                 "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}]})");
  ASSERT_TRUE(small.ok()) << small.status();
  auto bounded = ToolChoiceGrammar(small->request, chat::ToolCallFormat::kHermes);
  ASSERT_TRUE(bounded.ok() && bounded->has_value());
  const auto bounded_dfa = Dfa(**bounded);
  EXPECT_TRUE(bounded_dfa.Matches(calls));
  EXPECT_FALSE(bounded_dfa.Matches(calls + "\n" + paris));
  EXPECT_FALSE(hermes.Matches(""));                 // at least one call
  EXPECT_FALSE(hermes.Matches("Sure! " + paris));   // nothing but calls
  EXPECT_FALSE(hermes.Matches("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(hermes.Matches("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));

  // parallel_tool_calls false: exactly one call.
  auto one = ToolChoiceGrammar(Parse(R"(, "tool_choice": "required", "parallel_tool_calls": false)"),
                               chat::ToolCallFormat::kHermes);
  ASSERT_TRUE(one.ok() && one->has_value());
  const auto single = Dfa(**one);
  EXPECT_TRUE(single.Matches(paris));
  EXPECT_FALSE(single.Matches(paris + "\n" + now));

  auto llama = ToolChoiceGrammar(Parse(R"(, "tool_choice": "required")"), chat::ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(llama.ok() && llama->has_value());
  EXPECT_TRUE(Dfa(**llama).Matches(R"({"name": "now", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Rome"}})"));
  auto mistral = ToolChoiceGrammar(Parse(R"(, "tool_choice": "required")"), chat::ToolCallFormat::kMistral);
  ASSERT_TRUE(mistral.ok() && mistral->has_value());
  EXPECT_TRUE(Dfa(**mistral).Matches(R"([TOOL_CALLS][{"name": "now", "arguments": {}}, {"name": "now", "arguments": {"a": 1}}])"));
}

TEST(ToolChoiceGrammar, ErrorsNameTheMember) {
  // No tool-call format: "required" cannot be written.
  auto none = ToolChoiceGrammar(Parse(R"(, "tool_choice": "required")"), chat::ToolCallFormat::kNone);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(ErrorParam(none.status()), "tool_choice");
  // Two constraints on the same text.
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "now"}})"}) {
    auto both = ToolChoiceGrammar(Parse(std::string(R"(, "guided_regex": "a", "tool_choice": )") + choice),
                                  chat::ToolCallFormat::kHermes);
    ASSERT_FALSE(both.ok()) << choice;
    EXPECT_EQ(ErrorParam(both.status()), "tool_choice");
  }
  // An unsupported keyword in a tool's schema names its path.
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "f", "parameters":
                 {"type": "object", "properties": {"a": {"type": "string", "format": "date", "uniqueItems": true}}}}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  auto g = ToolChoiceGrammar(r->request, chat::ToolCallFormat::kHermes);
  ASSERT_TRUE(g.ok() && g->has_value());
  auto regex = structured::ToRegex(**g);
  ASSERT_FALSE(regex.ok());
  EXPECT_NE(regex.status().message().find("tools[0].function.parameters.properties.a.uniqueItems"), std::string::npos)
      << regex.status();
}

}  // namespace
}  // namespace kvserve::server
