// The prompts of the model's golden fixture (tests/fixtures/kvs_tiny_golden.json) carry
// BOS + SentencePiece ids; our encode(prompt, add_special=true) must reproduce them, or the
// model tests would feed the model different tokens than the reference did.
// The passkey entry is the exception: its ids are a slice of a longer encoding (it starts
// mid-word, "ach" without "▁") and its text is only their decoding, so it is not an
// encode() case.
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tests/unit/tokenizer/test_util.h"

namespace kvserve::tokenizer {
namespace {

TEST(KvsTinyGolden, PromptIdsMatch) {
  auto tok = LoadTokenizerDir(std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto golden = nlohmann::json::parse(testing::ReadFileOrDie(
      std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/kvs_tiny_golden.json"));
  const auto& prompts = golden.at("prompts");
  ASSERT_FALSE(prompts.empty());
  int checked = 0;
  for (const auto& p : prompts) {
    if (p.contains("passkey")) continue;
    ++checked;
    const std::string text = p.at("prompt").get<std::string>();
    EXPECT_EQ((*tok)->encode(text, /*add_special=*/true), p.at("ids").get<std::vector<int32_t>>())
        << p.value("name", std::string("?"));
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace kvserve::tokenizer
