#include "chat/reasoning_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve::chat {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
};

// Feeds `pieces` one at a time, as tokens arrive.
Split SplitPieces(const std::vector<std::string>& pieces, bool starts_in_reasoning = false,
          ReasoningMarkers markers = {}) {
  ReasoningSplitter s(std::move(markers), starts_in_reasoning);
  Split out;
  for (const auto& p : pieces) s.Push(p, out.reasoning, out.content);
  s.Finish(out.reasoning, out.content);
  return out;
}

// Every way of cutting `text` into two pieces gives the same split as the whole text.
void ExpectSplitInvariant(const std::string& text, bool starts_in_reasoning) {
  const Split whole = SplitPieces({text}, starts_in_reasoning);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Split parts = SplitPieces({text.substr(0, cut), text.substr(cut)}, starts_in_reasoning);
    EXPECT_EQ(parts.reasoning, whole.reasoning) << "cut at " << cut;
    EXPECT_EQ(parts.content, whole.content) << "cut at " << cut;
  }
}

TEST(ReasoningSplitter, SplitsThinkBlockFromContent) {
  const Split s = SplitPieces({"<think>\nadding 2 and 2\n</think>\n\n4"});
  EXPECT_EQ(s.reasoning, "\nadding 2 and 2\n");
  EXPECT_EQ(s.content, "\n\n4");
}

TEST(ReasoningSplitter, LeadingWhitespaceBeforeTheStartMarkerIsAllowed) {
  const Split s = SplitPieces({"\n <think>r</think>c"});
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "c");
}

TEST(ReasoningSplitter, OutputWithoutThinkBlockIsContent) {
  const Split s = SplitPieces({"just an answer <think>not reasoning</think>"});
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "just an answer <think>not reasoning</think>");
}

TEST(ReasoningSplitter, PromptThatOpensReasoningStartsInReasoning) {
  EXPECT_TRUE(ReasoningSplitter::PromptOpensReasoning("<|Assistant|><think>\n", {}));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<think>\n\n</think>\n\n", {}));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("user asks about <think> tags\nassistant\n", {}));
  const Split s = SplitPieces({"step one", "</think>", "answer"}, /*starts_in_reasoning=*/true);
  EXPECT_EQ(s.reasoning, "step one");
  EXPECT_EQ(s.content, "answer");
}

TEST(ReasoningSplitter, UnfinishedReasoningStaysReasoning) {
  const Split s = SplitPieces({"<think>still thinking </th"});
  EXPECT_EQ(s.reasoning, "still thinking </th");
  EXPECT_EQ(s.content, "");
}

TEST(ReasoningSplitter, MarkersSplitAcrossPiecesAreFound) {
  ExpectSplitInvariant("<think>a</think>b", false);
  ExpectSplitInvariant("  <think>\nx y\n</think>\n\nz", false);
  ExpectSplitInvariant("plain <thin", false);
  ExpectSplitInvariant("r1 </think> c1 </think> c2", true);
  const Split s = SplitPieces({"<", "th", "ink>", "r", "</", "think", ">", "c"});
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "c");
}

TEST(ReasoningSplitter, HoldsBackOnlyWhatMayBeAMarker) {
  ReasoningSplitter s({}, /*starts_in_reasoning=*/true);
  std::string reasoning, content;
  s.Push("abc</thi", reasoning, content);
  EXPECT_EQ(reasoning, "abc");  // "</thi" may become "</think>"
  s.Push("s is not it", reasoning, content);
  EXPECT_EQ(reasoning, "abc</this is not it");
  EXPECT_EQ(content, "");
}

TEST(ReasoningSplitter, ConfigurableMarkers) {
  const Split s = SplitPieces({"[[R]]why[[/R]]what"}, false, ReasoningMarkers{"[[R]]", "[[/R]]"});
  EXPECT_EQ(s.reasoning, "why");
  EXPECT_EQ(s.content, "what");
}

}  // namespace
}  // namespace kvserve::chat
