#include <gtest/gtest.h>

#include "structured/byte_dfa.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {
namespace {

ByteDfa Dfa(std::string_view pattern) {
  auto regex = ParseRegex(pattern);
  EXPECT_TRUE(regex.ok()) << pattern << ": " << regex.status();
  auto dfa = ByteDfa::Compile(regex.ok() ? *regex : RegexNode::Empty());
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  return *std::move(dfa);
}

TEST(RegexDfa, MatchesWhatPythonReMatches) {
  struct Case {
    const char* pattern;
    std::vector<const char*> yes, no;
  };
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"(ab)*c", {"c", "abc", "ababc"}, {"ab", "aabc"}},
      {"(?:ab)+", {"ab", "abab"}, {"", "aba"}},
      {"x?y{2,3}", {"yy", "xyyy"}, {"y", "xyyyy"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
      {"[a-c]+[^a-c]", {"abx", "c!"}, {"abc", "x"}},
      {"[\\w.]+@[a-z]+\\.com", {"j.doe_1@mail.com"}, {"@mail.com", "a@b.org"}},
      {"^(yes|no)$", {"yes", "no"}, {"yesno", "y"}},
      {"\\{\"a\": [0-9]\\}", {"{\"a\": 7}"}, {"{\"a\": 77}"}},
      {"caf\\u00e9|naïve", {"café", "naïve"}, {"cafe"}},
      {".", {"x", "é", "日"}, {"\n", "xy", ""}},
      {"[^\"]{1,2}", {"é", "ab", "日本"}, {"\"", "abc"}},
      {"a{2}b{,}", {"aab{,}"}, {"aab"}},  // {,} is literal in Python
  };
  for (const Case& c : cases) {
    const ByteDfa dfa = Dfa(c.pattern);
    for (const char* s : c.yes) EXPECT_TRUE(dfa.Matches(s)) << c.pattern << " should match " << s;
    for (const char* s : c.no) EXPECT_FALSE(dfa.Matches(s)) << c.pattern << " should not match " << s;
  }
}

TEST(RegexDfa, UnsupportedConstructsNameWhatAndWhere) {
  for (const char* p : {"(a)\\1", "(?=a)b", "(?P<x>a)", "a**+", "[é-ü]", "[^é]", "\\bword", "(ab", "ab)", "[ab"}) {
    auto r = ParseRegex(p);
    EXPECT_FALSE(r.ok()) << p;
    EXPECT_NE(r.status().message().find("offset"), std::string_view::npos) << r.status();
  }
}

TEST(RegexDfa, StatesAreSharedAndFinalStatesKnown) {
  const ByteDfa dfa = Dfa("(true|false)");
  const int32_t end = dfa.Walk(dfa.start(), "true");
  ASSERT_NE(end, ByteDfa::kDead);
  EXPECT_TRUE(dfa.accepting(end));
  EXPECT_TRUE(dfa.final_only(end));
  EXPECT_EQ(dfa.Walk(dfa.start(), "fals"), dfa.Walk(dfa.start(), "fals"));
  EXPECT_EQ(dfa.Walk(dfa.start(), "x"), ByteDfa::kDead);
  EXPECT_LT(dfa.num_classes(), 16);  // bytes no edge tells apart share a column
}

TEST(RegexDfa, StateLimitIsAnError) {
  auto regex = ParseRegex("(a|b)*a(a|b){12}");  // the classic exponential DFA
  ASSERT_TRUE(regex.ok());
  auto dfa = ByteDfa::Compile(*regex, /*max_states=*/1000);
  ASSERT_FALSE(dfa.ok());
  EXPECT_NE(dfa.status().message().find("too complex"), std::string_view::npos);
}

}  // namespace
}  // namespace kvserve::structured
