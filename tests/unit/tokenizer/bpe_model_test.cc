#include "tokenizer/bpe_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Vocab = std::vector<std::pair<std::string, int32_t>>;
using Merges = std::vector<std::pair<std::string, std::string>>;

std::vector<int32_t> Encode(const BpeModel& m, std::string_view word) {
  BpeScratch scratch;
  std::vector<int32_t> out;
  m.EncodeWord(word, scratch, out);
  return out;
}

TEST(BpeModel, LowerRankMergesFirstWhateverItsPosition) {
  // "abc": (b,c) outranks (a,b), so the result is a + bc, never ab + c.
  const Vocab vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  auto m = BpeModel::Create(vocab, {{"b", "c"}, {"a", "b"}}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Encode(*m, "abc"), ElementsAre(0, 4));
  auto swapped = BpeModel::Create(vocab, {{"a", "b"}, {"b", "c"}}, {});
  ASSERT_TRUE(swapped.ok());
  EXPECT_THAT(Encode(*swapped, "abc"), ElementsAre(3, 2));
}

TEST(BpeModel, AnIdFarBeyondTheVocabularyIsRefused) {
  // Holes are fine while the id space stays near the token count ...
  std::vector<std::pair<std::string, int32_t>> vocab{{"a", 0}, {"b", 1}, {"c", 65000}};
  EXPECT_TRUE(BpeModel::Create(vocab, {}, {}).ok());
  // ... a stray id near kMaxTokenId (the fuzzer's 16,111,116 in a 258-token file) is not.
  vocab.back().second = 16111116;
  auto m = BpeModel::Create(vocab, {}, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("vocab id 16111116 is far beyond the 3 tokens"), std::string::npos)
      << m.status();
}

TEST(BpeModel, EqualRanksMergeLeftmostFirstAndChain) {
  const Vocab vocab = {{"a", 0}, {"aa", 1}, {"aaaa", 2}};
  auto m = BpeModel::Create(vocab, {{"a", "a"}, {"aa", "aa"}}, {});
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(Encode(*m, "aaa"), ElementsAre(1, 0));
  EXPECT_THAT(Encode(*m, "aaaaa"), ElementsAre(2, 0));
  EXPECT_THAT(Encode(*m, "aaaaaa"), ElementsAre(2, 1));
}

TEST(BpeModel, ByteFallbackSpellsUnknownCharactersAsBytes) {
  Vocab vocab = {{"<unk>", 0}, {"h", 1}, {"i", 2}, {"hi", 3}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.emplace_back(name, 4 + b);
  }
  BpeOptions opts;
  opts.byte_fallback = true;
  opts.unk_id = 0;
  auto m = BpeModel::Create(vocab, {{"h", "i"}}, opts);
  ASSERT_TRUE(m.ok());
  // "é" = C3 A9, "😀" = F0 9F 98 80.
  EXPECT_THAT(Encode(*m, "hi\xC3\xA9"), ElementsAre(3, 4 + 0xC3, 4 + 0xA9));
  EXPECT_THAT(Encode(*m, "\xF0\x9F\x98\x80"), ElementsAre(4 + 0xF0, 4 + 0x9F, 4 + 0x98, 4 + 0x80));
  EXPECT_EQ(m->byte_id(0x41), 4 + 0x41);
}

TEST(BpeModel, UnknownCharactersMapToUnkFusedOrDropped) {
  const Vocab vocab = {{"<unk>", 0}, {"a", 1}};
  BpeOptions opts;
  opts.unk_id = 0;
  auto plain = BpeModel::Create(vocab, {}, opts);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(Encode(*plain,
                     "a\xC3\xA9\xC3\xA9"
                     "a"),
              ElementsAre(1, 0, 0, 1));
  opts.fuse_unk = true;
  auto fused = BpeModel::Create(vocab, {}, opts);
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(Encode(*fused,
                     "a\xC3\xA9\xC3\xA9"
                     "a"),
              ElementsAre(1, 0, 1));
  auto no_unk = BpeModel::Create(vocab, {}, {});
  ASSERT_TRUE(no_unk.ok());
  EXPECT_THAT(Encode(*no_unk,
                     "a\xC3\xA9"
                     "a"),
              ElementsAre(1, 1));
}

TEST(BpeModel, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  // "abc" is in the vocabulary but unreachable through the merges.
  const Vocab vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"bc", 3}, {"abc", 4}};
  BpeOptions opts;
  auto normal = BpeModel::Create(vocab, {{"b", "c"}}, opts);
  ASSERT_TRUE(normal.ok());
  EXPECT_THAT(Encode(*normal, "abc"), ElementsAre(0, 3));
  opts.ignore_merges = true;
  auto ignoring = BpeModel::Create(vocab, {{"b", "c"}}, opts);
  ASSERT_TRUE(ignoring.ok());
  EXPECT_THAT(Encode(*ignoring, "abc"), ElementsAre(4));
  EXPECT_THAT(Encode(*ignoring, "abcc"), ElementsAre(0, 3, 2));
}

TEST(BpeModel, LongWordsStayFast) {
  // A SentencePiece-style segment is one word; 200k symbols must not go quadratic.
  const Vocab vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"abab", 3}};
  auto m = BpeModel::Create(vocab, {{"a", "b"}, {"ab", "ab"}}, {});
  ASSERT_TRUE(m.ok());
  std::string word;
  for (int i = 0; i < 100000; ++i) word += "ab";
  const auto ids = Encode(*m, word);
  ASSERT_EQ(ids.size(), 50000u);
  EXPECT_EQ(ids.front(), 3);
  EXPECT_EQ(ids.back(), 3);
}

TEST(BpeModel, RejectsInconsistentInput) {
  auto missing = BpeModel::Create({{"a", 0}, {"b", 1}}, {{"a", "b"}}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("merged token"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("merge #0"));
  auto dup = BpeModel::Create({{"a", 0}, {"b", 0}}, {}, {});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("used twice"));
  auto bad_unk = BpeModel::Create({{"a", 0}}, {}, BpeOptions{false, 7, false, false});
  EXPECT_FALSE(bad_unk.ok());
}

}  // namespace
}  // namespace kvserve::tokenizer
