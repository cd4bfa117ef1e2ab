// decode(encode(x)) == x on 1 MiB of mixed text (see test_corpus.h), through a byte-fallback
// SentencePiece-style tokenizer and through byte-level ones.
#include <gtest/gtest.h>

#include "tests/unit/tokenizer/test_corpus.h"

namespace kvserve::tokenizer {
namespace {

using testing::BuildCorpus;
using testing::kTextBytes;
using testing::LoadFixture;

class RoundTrip1MiB : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { corpus_ = new std::string(BuildCorpus()); }
  static void TearDownTestSuite() { delete corpus_; }
  static std::string* corpus_;
};
std::string* RoundTrip1MiB::corpus_ = nullptr;

TEST_P(RoundTrip1MiB, DecodeOfEncodeIsIdentity) {
  const std::string& text = *corpus_;
  ASSERT_EQ(text.size(), kTextBytes);
  ASSERT_TRUE(IsValidUtf8(text));
  auto tok = LoadFixture(GetParam());
  ASSERT_NE(tok, nullptr);
  testing::ExpectRoundTrip(*tok, text, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RoundTrip1MiB,
                         ::testing::Values("spm_bytefallback", "byte_level", "llama3_style"));

}  // namespace
}  // namespace kvserve::tokenizer
