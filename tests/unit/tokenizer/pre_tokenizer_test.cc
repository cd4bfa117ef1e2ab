#include "tokenizer/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace kvserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::unique_ptr<Regex> Re(std::string_view pattern) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  return *std::move(re);
}

std::vector<std::string> PreTokenize(const PreTokenizer& p, std::string_view text,
                                     bool at_start = true) {
  PieceList pieces;
  PieceList scratch;
  pieces.add(text);
  pieces.first_at_text_start = at_start;
  p.Apply(pieces, scratch);
  std::vector<std::string> out;
  for (size_t i = 0; i < pieces.size(); ++i) out.emplace_back(pieces[i]);
  return out;
}

std::vector<std::string> SplitWith(std::string_view pattern, SplitBehavior b, bool invert,
                                   std::string_view text) {
  PreTokenizer p;
  p.add(PreTokenizer::Split(Re(pattern), b, invert));
  return PreTokenize(p, text);
}

TEST(Regex, FindsUnicodeClassesAndReportsBadPatterns) {
  std::vector<ByteSpan> m;
  Re(R"(\p{L}+)")->FindAll("h\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 42", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].begin, 0u);
  EXPECT_EQ(m[0].end, 3u);
  EXPECT_EQ(m[1].begin, 4u);
  EXPECT_EQ(m[1].end, 10u);
  auto bad = Regex::Compile("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("(unclosed"));
  // Literal quoting survives metacharacters and an embedded \E.
  m.clear();
  Re("")->FindAll("abc", m);
  EXPECT_TRUE(m.empty());  // empty matches are never reported
  auto lit = Regex::Literal("a.b\\Ec");
  ASSERT_TRUE(lit.ok());
  m.clear();
  (*lit)->FindAll("axb a.b\\Ec", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 4u);
}

TEST(Regex, EmptyMatchRetriesForANonEmptyOneAtTheSamePlace) {
  std::vector<ByteSpan> m;
  Re("x*|b")->FindAll("abxx", m);  // at 1, "x*" matches empty, then "b" must be found
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].begin, 1u);
  EXPECT_EQ(m[0].end, 2u);
  EXPECT_EQ(m[1].begin, 2u);
  EXPECT_EQ(m[1].end, 4u);
}

TEST(Split, Behaviours) {
  const std::string text = "a--b-c";
  EXPECT_THAT(SplitWith("-", SplitBehavior::kRemoved, false, text), ElementsAre("a", "b", "c"));
  EXPECT_THAT(SplitWith("-", SplitBehavior::kIsolated, false, text),
              ElementsAre("a", "-", "-", "b", "-", "c"));
  EXPECT_THAT(SplitWith("-", SplitBehavior::kMergedWithPrevious, false, text),
              ElementsAre("a-", "-", "b-", "c"));
  EXPECT_THAT(SplitWith("-", SplitBehavior::kMergedWithNext, false, text),
              ElementsAre("a", "-", "-b", "-c"));
  EXPECT_THAT(SplitWith("-", SplitBehavior::kContiguous, false, text),
              ElementsAre("a", "--", "b", "-", "c"));
  // invert: the matches are the words, the gaps the delimiters.
  EXPECT_THAT(SplitWith(R"(\w+)", SplitBehavior::kRemoved, true, "hi, you"),
              ElementsAre("hi", "you"));
}

TEST(Split, Llama3PatternCutsLikeTheReference) {
  EXPECT_THAT(SplitWith(kLlama3Pattern, SplitBehavior::kIsolated, false,
                        "I'LL pay 12345 dollars!!\n\n  ok"),
              ElementsAre("I", "'LL", " pay", " ", "123", "45", " dollars", "!!\n\n", " ", " ok"));
}

TEST(ByteLevelPreTokenizer, Gpt2SplitAndByteAlphabet) {
  PreTokenizer p;
  p.add(PreTokenizer::ByteLevel(false, Re(kGpt2SplitPattern)));
  // "Ġ" is the byte-level space; "é" (C3 A9) becomes "Ã©".
  EXPECT_THAT(PreTokenize(p, "Hello  world's caf\xC3\xA9"),
              ElementsAre("Hello", "\xC4\xA0", "\xC4\xA0world", "'s",
                          "\xC4\xA0"
                          "caf\xC3\x83\xC2\xA9"));
  PreTokenizer prefixed;
  prefixed.add(PreTokenizer::ByteLevel(true, Re(kGpt2SplitPattern)));
  EXPECT_THAT(PreTokenize(prefixed, "Hi"), ElementsAre("\xC4\xA0Hi"));
  PreTokenizer no_regex;
  no_regex.add(PreTokenizer::ByteLevel(false, nullptr));
  EXPECT_THAT(PreTokenize(no_regex, "a b"), ElementsAre("a\xC4\xA0"
                                                        "b"));
}

TEST(MetaspacePreTokenizer, PrependSchemesAndSplit) {
  const std::string rep = "\xE2\x96\x81";  // "▁"
  PreTokenizer always;
  always.add(PreTokenizer::Metaspace(rep, PrependScheme::kAlways, true));
  EXPECT_THAT(PreTokenize(always, "Hey  you"), ElementsAre(rep + "Hey", rep, rep + "you"));
  PreTokenizer first;
  first.add(PreTokenizer::Metaspace(rep, PrependScheme::kFirst, false));
  EXPECT_THAT(PreTokenize(first, "a b", true), ElementsAre(rep + "a" + rep + "b"));
  EXPECT_THAT(PreTokenize(first, "a b", false), ElementsAre("a" + rep + "b"));
  PreTokenizer never;
  never.add(PreTokenizer::Metaspace(rep, PrependScheme::kNever, true));
  EXPECT_THAT(PreTokenize(never, "a b"), ElementsAre("a", rep + "b"));
}

TEST(DigitsPreTokenizer, IndividualOrContiguous) {
  PreTokenizer each;
  each.add(PreTokenizer::Digits(Re(R"(\p{N})"), true));
  EXPECT_THAT(PreTokenize(each, "ab123c"), ElementsAre("ab", "1", "2", "3", "c"));
  PreTokenizer runs;
  runs.add(PreTokenizer::Digits(Re(R"(\p{N})"), false));
  EXPECT_THAT(PreTokenize(runs, "ab123c"), ElementsAre("ab", "123", "c"));
}

TEST(Normalizer, PrependOnlyNonEmptyThenReplace) {
  Normalizer n;
  n.add(Normalizer::Prepend("\xE2\x96\x81"));
  n.add(Normalizer::ReplaceLiteral(" ", "\xE2\x96\x81"));
  std::string s = "Hi  there";
  n.Apply(s);
  EXPECT_EQ(s, "\xE2\x96\x81Hi\xE2\x96\x81\xE2\x96\x81there");
  std::string empty;
  n.Apply(empty);
  EXPECT_EQ(empty, "");
  Normalizer re;
  re.add(Normalizer::ReplaceRegex(Re(" {2,}"), " "));
  std::string spaced = "a    b  c d";
  re.Apply(spaced);
  EXPECT_EQ(spaced, "a b c d");
}

TEST(Normalizer, UnicodeFormsWhenBuiltWithIcu) {
  auto nfc = Normalizer::Unicode(UnicodeForm::kNfc);
#if defined(KVSERVE_TOKENIZER_HAVE_ICU)
  ASSERT_TRUE(nfc.ok()) << nfc.status();
  Normalizer n;
  n.add(*std::move(nfc));
  std::string s = "e\xCC\x81";  // e + combining acute
  n.Apply(s);
  EXPECT_EQ(s, "\xC3\xA9");
  auto nfkc = Normalizer::Unicode(UnicodeForm::kNfkc);
  ASSERT_TRUE(nfkc.ok());
  Normalizer k;
  k.add(*std::move(nfkc));
  std::string lig = "\xEF\xAC\x81";  // "ﬁ" ligature
  k.Apply(lig);
  EXPECT_EQ(lig, "fi");
#else
  EXPECT_EQ(nfc.status().code(), absl::StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace kvserve::tokenizer
