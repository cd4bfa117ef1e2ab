#include "jinja/lexer.h"

#include <gtest/gtest.h>

namespace kvserve::jinja {
namespace {

std::string Texts(std::string_view src, LexOptions opts = {}) {
  auto tokens = Lex(src, opts);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  std::string out;
  for (const Token& t : *tokens)
    if (t.kind == TokenKind::kText) out += "[" + t.text + "]";
  return out;
}

TEST(JinjaLexer, TrimBlocksDropsOneNewlineAfterBlockAndCommentTags) {
  EXPECT_EQ(Texts("{% if x %}\n\nA{# c #}\nB{{ y }}\nC"), "[\nA][B][\nC]");
  EXPECT_EQ(Texts("{% if x %}\nA", {.trim_blocks = false, .lstrip_blocks = false}), "[\nA]");
}

TEST(JinjaLexer, LstripBlocksOnlyAtLineStartAndNotForPlus) {
  EXPECT_EQ(Texts("A\n   {% if x %}B"), "[A\n][B]");
  EXPECT_EQ(Texts("A  {% if x %}B"), "[A  ][B]");       // not at line start
  EXPECT_EQ(Texts("A\n  {%+ if x %}B"), "[A\n  ][B]");  // + keeps it
  EXPECT_EQ(Texts("A\n  {{ x }}B"), "[A\n  ][B]");      // variable tags are never lstripped
}

TEST(JinjaLexer, DashStripsAllWhitespace) {
  EXPECT_EQ(Texts("A \n\t {%- if x -%} \n B"), "[A][B]");
  EXPECT_EQ(Texts("A \n {{- x -}}\n\n B"), "[A][B]");
}

TEST(JinjaLexer, StringEscapesAndLineNumbers) {
  auto tokens = Lex("line1\n{{ 'a\\n\\'b' }}\n{{ \"x\" }}");
  ASSERT_TRUE(tokens.ok());
  const Token& s = (*tokens)[2];
  EXPECT_EQ(s.kind, TokenKind::kString);
  EXPECT_EQ(s.text, "a\n'b");
  EXPECT_EQ(s.line, 2);
  EXPECT_EQ((*tokens)[6].line, 3);
}

TEST(JinjaLexer, ErrorsNameTheLine) {
  auto unterminated = Lex("a\nb\n{{ 'oops }}");
  ASSERT_FALSE(unterminated.ok());
  EXPECT_NE(unterminated.status().message().find("template line 3"), std::string_view::npos);
  auto unclosed = Lex("{# never");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_NE(unclosed.status().message().find("unclosed comment"), std::string_view::npos);
}

}  // namespace
}  // namespace kvserve::jinja
