#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"

namespace kvserve::tokenizer {
namespace {

TEST(Utf8, ScanClassifiesSequences) {
  EXPECT_EQ(ScanUtf8("a", 0).step, Utf8Step::kValid);
  const Utf8Scan euro = ScanUtf8("\xE2\x82\xAC", 0);
  EXPECT_EQ(euro.step, Utf8Step::kValid);
  EXPECT_EQ(euro.length, 3u);
  EXPECT_EQ(euro.code_point, U'€');
  const Utf8Scan truncated = ScanUtf8("\xF0\x9F\x98", 0);
  EXPECT_EQ(truncated.step, Utf8Step::kIncomplete);
  EXPECT_EQ(truncated.length, 3u);
  // Overlong (C0), surrogate (ED A0) and stray continuation bytes are ill-formed.
  EXPECT_EQ(ScanUtf8("\xC0\x80", 0).step, Utf8Step::kInvalid);
  const Utf8Scan surrogate = ScanUtf8("\xED\xA0\x80", 0);
  EXPECT_EQ(surrogate.step, Utf8Step::kInvalid);
  EXPECT_EQ(surrogate.length, 1u);
  EXPECT_EQ(ScanUtf8("\x80", 0).step, Utf8Step::kInvalid);
  // E2 82 followed by ASCII: the maximal subpart is the two bytes.
  const Utf8Scan cut = ScanUtf8("\xE2\x82x", 0);
  EXPECT_EQ(cut.step, Utf8Step::kInvalid);
  EXPECT_EQ(cut.length, 2u);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  std::string out;
  AppendUtf8Lossy("a\xE2\x82x\xFF\xF0\x9F\x98\x80z\xF0\x9F", out);
  EXPECT_EQ(out, "a\xEF\xBF\xBDx\xEF\xBF\xBD\xF0\x9F\x98\x80z\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE6\x97\xA5\xF0\x9F\x98\x80"));
}

TEST(Utf8, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(CompleteUtf8Prefix("\xE2"), 0u);
  // Already ill-formed tails are not held back: they can never become valid.
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2x"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\x80\x80"), 3u);
}

TEST(Utf8, CutAnywhereThenRepairEqualsOneShotRepair) {
  const std::string s = "x\xE2\x82\xAC\xF0\x9F\x98\x80\xE2\x82y\xFF\xC3\xA9\xF0\x9F";
  std::string one_shot;
  AppendUtf8Lossy(s, one_shot);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    std::string pending = s.substr(0, cut);
    std::string out;
    size_t complete = CompleteUtf8Prefix(pending);
    AppendUtf8Lossy(std::string_view(pending).substr(0, complete), out);
    pending = pending.substr(complete) + s.substr(cut);
    AppendUtf8Lossy(pending, out);
    EXPECT_EQ(out, one_shot) << "cut at " << cut;
  }
}

TEST(ByteLevel, MappingIsTheGpt2Table) {
  EXPECT_EQ(kByteLevel.byte_to_char['A'], U'A');
  EXPECT_EQ(kByteLevel.byte_to_char[' '], U'\u0120');   // "Ġ"
  EXPECT_EQ(kByteLevel.byte_to_char['\n'], U'\u010A');  // "Ċ"
  EXPECT_EQ(kByteLevel.byte_to_char[0xAD], U'\u0143');
  for (int b = 0; b < 256; ++b) {
    auto back = ByteLevelCharToByte(kByteLevel.byte_to_char[b]);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, b);
  }
  std::string mapped;
  AppendByteLevel(" h\xC3\xA9", mapped);
  EXPECT_EQ(mapped, "\xC4\xA0h\xC3\x83\xC2\xA9");  // "Ġhé" spelled as bytes C3 A9 -> "Ã©"
  EXPECT_EQ(ByteLevelToBytes(mapped).value(), " h\xC3\xA9");
  EXPECT_FALSE(ByteLevelToBytes("\xE2\x82\xAC").has_value());  // "€" is no byte-level char
}

}  // namespace
}  // namespace kvserve::tokenizer
