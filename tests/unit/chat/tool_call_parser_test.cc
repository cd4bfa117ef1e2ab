#include "chat/tool_call_parser.h"

#include <gtest/gtest.h>

namespace kvserve::chat {
namespace {

std::vector<ToolCall> ParseOk(ToolCallFormat f, std::string_view section) {
  auto calls = MakeToolCallSyntax(f)->Parse(section);
  EXPECT_TRUE(calls.has_value()) << section;
  return calls.value_or(std::vector<ToolCall>{});
}

TEST(ToolCallParser, FormatNamesAndDetection) {
  for (auto f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                 ToolCallFormat::kMistral}) {
    EXPECT_EQ(ParseToolCallFormat(Name(f)), f);
  }
  EXPECT_FALSE(ParseToolCallFormat("pythonic").has_value());
  EXPECT_EQ(DetectToolCallFormat("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{{- \"<|python_tag|>\" }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ message.content }}"), ToolCallFormat::kNone);
  EXPECT_EQ(MakeToolCallSyntax(ToolCallFormat::kNone), nullptr);
}

TEST(ToolCallParser, HermesParsesEveryCall) {
  const auto calls = ParseOk(ToolCallFormat::kHermes,
                             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                             "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"é\"}}\n"
                             "</tool_call>");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(calls[1].name, "search");
  EXPECT_EQ(calls[1].arguments, "{\"q\":\"é\"}");
}

TEST(ToolCallParser, HermesAcceptsAnUnclosedLastCallAndRejectsBadJson) {
  auto calls = ParseOk(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "{}");
  auto syntax = MakeToolCallSyntax(ToolCallFormat::kHermes);
  EXPECT_FALSE(syntax->Parse("<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>"));
  EXPECT_FALSE(syntax->Parse("<tool_call>{\"arguments\": {}}</tool_call>"));  // no name
  EXPECT_FALSE(syntax->Parse("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"));
}

TEST(ToolCallParser, HermesKeepsTheCallsCompletedBeforeACut) {
  auto syntax = MakeToolCallSyntax(ToolCallFormat::kHermes);
  const std::string whole =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  // max_tokens cut the second call anywhere: the first stands.
  for (const std::string cut :
       {"\n<tool_call>", "\n<tool_call>\n{\"name\": \"g\", \"argu", "\n<tool_call>\n{\"name\""}) {
    auto calls = syntax->Parse(whole + cut);
    ASSERT_TRUE(calls.has_value()) << cut;
    ASSERT_EQ(calls->size(), 1u) << cut;
    EXPECT_EQ((*calls)[0].arguments, "{\"a\":1}");
  }
  // A lone cut call is not a call; a closed malformed one still makes the section content.
  EXPECT_FALSE(syntax->Parse("<tool_call>\n{\"name\": \"f\", \"argu"));
  EXPECT_FALSE(syntax->Parse(whole + "\n<tool_call>{\"name\": 1}</tool_call>"));
}

TEST(ToolCallParser, HermesFindsTheSectionAndHoldsBackPartialMarkers) {
  auto syntax = MakeToolCallSyntax(ToolCallFormat::kHermes);
  size_t hold = 99;
  EXPECT_EQ(syntax->FindSection("Sure. <tool_call>{", false, &hold), 6u);
  EXPECT_EQ(syntax->FindSection("Sure. <tool_", false, &hold), std::string_view::npos);
  EXPECT_EQ(hold, 6u);
  EXPECT_EQ(syntax->FindSection("a < b", false, &hold), std::string_view::npos);
  EXPECT_EQ(hold, 0u);
}

TEST(ToolCallParser, Llama3JsonOnlyAtTheStartOfTheOutput) {
  auto syntax = MakeToolCallSyntax(ToolCallFormat::kLlama3Json);
  size_t hold = 0;
  EXPECT_EQ(syntax->FindSection("\n{\"name\"", true, &hold), 0u);
  EXPECT_EQ(syntax->FindSection("<|python_tag|>{", true, &hold), 0u);
  EXPECT_EQ(syntax->FindSection("<|python", true, &hold), std::string_view::npos);
  EXPECT_EQ(hold, 8u);
  EXPECT_EQ(syntax->FindSection("Hello {", true, &hold), std::string_view::npos);
  EXPECT_EQ(hold, 0u);
  EXPECT_EQ(syntax->FindSection("{", false, &hold), std::string_view::npos);
  const auto calls = ParseOk(ToolCallFormat::kLlama3Json,
                             "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; "
                             "{\"name\": \"b\", \"parameters\": {\"s\": \"}{;\"}}");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(calls[1].name, "b");
  EXPECT_EQ(calls[1].arguments, "{\"s\":\"}{;\"}");
  EXPECT_FALSE(syntax->Parse("{\"name\": \"a\", \"parameters\": {}} trailing words"));
  EXPECT_FALSE(syntax->Parse("{\"name\": \"a\", \"parameters\": {"));
}

TEST(ToolCallParser, MistralBothForms) {
  auto calls = ParseOk(ToolCallFormat::kMistral,
                       "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": true}}, "
                       "{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}]");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments, "{\"a\":true}");
  EXPECT_EQ(calls[1].arguments, "{\"b\": 2}");
  calls = ParseOk(ToolCallFormat::kMistral, "[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "f");
  EXPECT_EQ(calls[1].name, "g");
  EXPECT_EQ(calls[1].arguments, "{}");
  EXPECT_FALSE(MakeToolCallSyntax(ToolCallFormat::kMistral)->Parse("[TOOL_CALLS] sorry"));
}

}  // namespace
}  // namespace kvserve::chat
