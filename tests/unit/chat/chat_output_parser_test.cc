#include "chat/chat_output_parser.h"

#include <gtest/gtest.h>

namespace kvserve::chat {
namespace {

ChatOutputDelta RunPieces(const ChatOutputConfig& config, const std::vector<std::string>& pieces,
                          std::vector<ChatOutputDelta>* steps = nullptr) {
  ChatOutputParser p(config);
  ChatOutputDelta total;
  auto add = [&](const ChatOutputDelta& d) {
    total.content += d.content;
    total.reasoning += d.reasoning;
    for (const auto& c : d.tool_calls) total.tool_calls.push_back(c);
    if (steps != nullptr) steps->push_back(d);
  };
  for (const auto& piece : pieces) {
    ChatOutputDelta d;
    p.Push(piece, d);
    add(d);
  }
  ChatOutputDelta last;
  p.Finish(last);
  add(last);
  return total;
}

// Every piece split of `text` yields the same result as the whole.
ChatOutputDelta RunAllSplits(const ChatOutputConfig& config, const std::string& text) {
  const ChatOutputDelta whole = RunPieces(config, {text});
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const ChatOutputDelta d = RunPieces(config, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(d.content, whole.content) << cut;
    EXPECT_EQ(d.reasoning, whole.reasoning) << cut;
    EXPECT_EQ(d.tool_calls.size(), whole.tool_calls.size()) << cut;
  }
  return whole;
}

TEST(ChatOutputParser, PlainTextPassesThrough) {
  const ChatOutputDelta d = RunAllSplits({}, "Hello <tool_call> <think> world");
  EXPECT_EQ(d.content, "Hello <tool_call> <think> world");
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST(ChatOutputParser, ReasoningThenHermesToolCalls) {
  ChatOutputConfig config;
  config.split_reasoning = true;
  config.tools = ToolCallFormat::kHermes;
  config.call_id_prefix = "call_x_";
  const ChatOutputDelta d = RunAllSplits(
      config,
      "<think>need weather</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>");
  EXPECT_EQ(d.reasoning, "need weather");
  EXPECT_EQ(d.content, "\n\nLet me check.\n");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].id, "call_x_0");
  EXPECT_EQ(d.tool_calls[1].id, "call_x_1");
  EXPECT_EQ(d.tool_calls[1].arguments, "{\"city\":\"Rome\"}");
}

TEST(ChatOutputParser, ToolCallsArriveInTheLastDelta) {
  ChatOutputConfig config;
  config.tools = ToolCallFormat::kHermes;
  std::vector<ChatOutputDelta> steps;
  RunPieces(config, {"ok ", "<tool_call>", "{\"name\": \"f\", ", "\"arguments\": {}}", "</tool_call>"}, &steps);
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0].content, "ok ");
  for (size_t i = 0; i + 1 < steps.size(); ++i) EXPECT_TRUE(steps[i].tool_calls.empty());
  ASSERT_EQ(steps.back().tool_calls.size(), 1u);
  EXPECT_EQ(steps.back().tool_calls[0].name, "f");
}

TEST(ChatOutputParser, MalformedToolCallIsReturnedAsContent) {
  ChatOutputConfig config;
  config.tools = ToolCallFormat::kHermes;
  const ChatOutputDelta d = RunAllSplits(config, "x <tool_call>{\"name\": oops</tool_call>");
  EXPECT_EQ(d.content, "x <tool_call>{\"name\": oops</tool_call>");
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST(ChatOutputParser, Llama3JsonWholeOutput) {
  ChatOutputConfig config;
  config.tools = ToolCallFormat::kLlama3Json;
  ChatOutputDelta d = RunAllSplits(config, " {\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\":[1,2]}");
  EXPECT_EQ(d.content, "");
  d = RunAllSplits(config, "The answer is {\"name\": \"f\"}");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "The answer is {\"name\": \"f\"}");
}

TEST(ChatOutputParser, MistralAfterContent) {
  ChatOutputConfig config;
  config.tools = ToolCallFormat::kMistral;
  const ChatOutputDelta d = RunAllSplits(config, "Hmm.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
  EXPECT_EQ(d.content, "Hmm.");
  ASSERT_EQ(d.tool_calls.size(), 1u);
}

}  // namespace
}  // namespace kvserve::chat
