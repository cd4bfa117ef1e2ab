#include "tokenizer/incremental_detokenizer.h"

#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/tokenizer/test_util.h"
#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using testing::LoadFixture;

std::vector<std::string> FeedAll(const Tokenizer& tok, std::span<const int32_t> ids,
                                 DetokenizerOptions opts = {}) {
  IncrementalDetokenizer detok(tok, opts);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(detok.feed(id));
  chunks.push_back(detok.flush());
  return chunks;
}

std::string Join(const std::vector<std::string>& chunks) {
  std::string out;
  for (const auto& c : chunks) out += c;
  return out;
}

int32_t Id(const Tokenizer& tok, std::string_view token) {
  auto id = tok.token_to_id(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(IncrementalDetokenizer, EmojiSplitOverByteFallbackTokensComesOutWhole) {
  auto tok = LoadFixture("spm_bytefallback");
  ASSERT_NE(tok, nullptr);
  // "😀" = F0 9F 98 80 as four byte-fallback tokens.
  const std::vector<int32_t> ids = {Id(*tok, "<0xF0>"), Id(*tok, "<0x9F>"), Id(*tok, "<0x98>"),
                                    Id(*tok, "<0x80>")};
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.feed(ids[0]), "");
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(detok.feed(ids[1]), "");
  EXPECT_EQ(detok.feed(ids[2]), "");
  EXPECT_EQ(detok.feed(ids[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(detok.pending_bytes(), 0u);
  EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizer, BrokenSequencesBecomeReplacementCharacters) {
  auto tok = LoadFixture("spm_bytefallback");
  ASSERT_NE(tok, nullptr);
  IncrementalDetokenizer detok(*tok, {.skip_special = true, .at_text_start = false});
  EXPECT_EQ(detok.feed(Id(*tok, "<0xE2>")), "");
  EXPECT_EQ(detok.feed(Id(*tok, "<0x82>")), "");
  // A character cannot continue with "a": the two held bytes become one U+FFFD.
  EXPECT_EQ(detok.feed(Id(*tok, "a")),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(detok.feed(Id(*tok, "<0xC3>")), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");  // unfinished at the end of the stream
}

TEST(IncrementalDetokenizer, LeadingSpaceIsStrippedOnlyAtTheStart) {
  auto tok = LoadFixture("spm_bytefallback");
  ASSERT_NE(tok, nullptr);
  const auto ids = tok->encode("to the end", false);
  ASSERT_GE(ids.size(), 3u);
  const auto chunks = FeedAll(*tok, ids);
  EXPECT_EQ(Join(chunks), "to the end");
  EXPECT_NE(chunks[0].front(), ' ');
  // A stream that continues earlier text keeps the first token's space.
  EXPECT_EQ(Join(FeedAll(*tok, ids, {.skip_special = true, .at_text_start = false})),
            " to the end");
  // A lone "▁" first: it alone is stripped, the next token keeps its space.
  const std::vector<int32_t> two = {Id(*tok, "\xE2\x96\x81"), Id(*tok, "\xE2\x96\x81")};
  EXPECT_THAT(FeedAll(*tok, two), ElementsAre("", " ", ""));
}

TEST(IncrementalDetokenizer, SpecialTokensAreSkippedOrSpelledOut) {
  auto tok = LoadFixture("spm_bytefallback");
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = {Id(*tok, "a"), Id(*tok, "<|im_end|>")};
  EXPECT_EQ(Join(FeedAll(*tok, ids)), "a");
  EXPECT_EQ(Join(FeedAll(*tok, ids, {.skip_special = false, .at_text_start = true})),
            "a<|im_end|>");
}

// Streaming must equal one-shot decoding, chunk by chunk valid UTF-8, for real text and for
// arbitrary id sequences (which produce every kind of broken byte sequence).
void CheckStreamingEqualsDecode(const Tokenizer& tok, std::span<const int32_t> ids) {
  const auto chunks = FeedAll(tok, ids);
  for (const auto& c : chunks) ASSERT_TRUE(IsValidUtf8(c)) << "broken chunk";
  ASSERT_EQ(Join(chunks), tok.decode(ids, /*skip_special=*/true));
}

class StreamingEqualsDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingEqualsDecode, OnTextAndOnRandomIds) {
  auto tok = LoadFixture(GetParam());
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = {
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "\xF0\x9F\x98\x80\xF0\x9F\x8E\x89 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and "
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      " leading and trailing ",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\xA9",
  };
  for (const auto& text : texts) {
    const auto ids = tok->encode(text, false);
    CheckStreamingEqualsDecode(*tok, ids);
    EXPECT_EQ(Join(FeedAll(*tok, ids)), text);
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_id(0, tok->vocab_size() - 1);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + rng() % 12);
    for (auto& id : ids) id = any_id(rng);
    CheckStreamingEqualsDecode(*tok, ids);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamingEqualsDecode,
                         ::testing::Values("spm_bytefallback", "byte_level", "llama3_style"));

}  // namespace
}  // namespace kvserve::tokenizer
