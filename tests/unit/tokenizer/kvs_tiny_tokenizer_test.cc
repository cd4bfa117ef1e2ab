// The bundled model's tokenizer (models/kvs-tiny) against the ids SentencePiece produced at
// training time (tests/fixtures/tokenizer_kvs_tiny.json, written by
// tools/train_tiny_model/make_fixtures.py). Registered only when both exist.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/unit/tokenizer/test_corpus.h"
#include "tests/unit/tokenizer/test_util.h"
#include "tokenizer/incremental_detokenizer.h"

namespace kvserve::tokenizer {
namespace {

using chat::ChatMessage;
using chat::ChatRenderOptions;
using chat::SelectChatTemplate;

using testing::ReadFileOrDie;

const std::string kModelDir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";

std::unique_ptr<Tokenizer> LoadBundled() {
  auto tok = LoadTokenizerDir(kModelDir);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

TEST(KvsTinyTokenizer, IdsMatchSentencePieceOnEveryFixtureSnippet) {
  auto tok = LoadBundled();
  ASSERT_NE(tok, nullptr);
  const auto fixture = nlohmann::json::parse(
      ReadFileOrDie(std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer_kvs_tiny.json"));
  const auto& cases = fixture.at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok->encode(text, /*add_special=*/false);
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    if (c.contains("pieces")) {
      std::vector<std::string> pieces;
      for (int32_t id : got) pieces.emplace_back(tok->id_to_token(id));
      EXPECT_EQ(pieces, c.at("pieces").get<std::vector<std::string>>())
          << nlohmann::json(text).dump();
    }
    // A literal "▁" in the text decodes as a space (as in SentencePiece); all else round-trips.
    if (text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(tok->decode(got, /*skip_special=*/false), text) << nlohmann::json(text).dump();
      std::string streamed;
      IncrementalDetokenizer detok(*tok, {.skip_special = false, .at_text_start = true});
      for (int32_t id : got) streamed += detok.feed(id);
      streamed += detok.flush();
      EXPECT_EQ(streamed, text) << nlohmann::json(text).dump();
    }
  }
}

TEST(KvsTinyTokenizer, DirectoryConfigAndChatTemplate) {
  auto tok = LoadBundled();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 2048);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 3);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 4);
  EXPECT_EQ(tok->encode("Hello", /*add_special=*/true).front(), 1);  // add_bos_token: true

  auto tmpl = SelectChatTemplate("auto", tok->chat_template(),
                                 {.bos = tok->bos_token(), .eos = tok->eos_token()});
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ((*tmpl)->name(), "jinja");  // the model's own template, rendered by kvserve::jinja
  EXPECT_FALSE((*tmpl)->renders_bos());
  auto prompt = (*tmpl)->Render(std::vector<ChatMessage>{{"user", "Who was Joseph?"}}, true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "<|im_start|>user\nWho was Joseph?<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok->encode(*prompt, /*add_special=*/!(*tmpl)->renders_bos());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // exactly one BOS
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 3), 2);  // <|im_start|> as single tokens
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 4), 1);
}

// With tools the template writes a Hermes-style tool-call format (the server detects it by
// "<tool_call>"): the tools header, earlier calls and tool results; without tools it is chatml.
TEST(KvsTinyTokenizer, ChatTemplateWritesHermesToolCalls) {
  auto tok = LoadBundled();
  ASSERT_NE(tok, nullptr);
  EXPECT_NE(tok->chat_template().find("<tool_call>"), std::string::npos);
  auto tmpl = SelectChatTemplate("auto", tok->chat_template(),
                                 {.bos = tok->bos_token(), .eos = tok->eos_token()});
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  std::vector<ChatMessage> messages{
      {"system", "Be brief."}, {"user", "Weather?"}, {"assistant", ""}, {"tool", "sunny"}};
  messages[2].tool_calls_json =
      R"([{"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])";
  messages[3].tool_call_id = "c0";
  ChatRenderOptions options;
  options.tools_json = R"([{"type": "function", "function": {"name": "get_weather"}}])";
  auto prompt = (*tmpl)->Render(messages, options);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(
      *prompt,
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nTo call a function, write <tool_call>\n"
      "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}\n</tools><|im_end|>\n"
      "<|im_start|>user\nWeather?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nsunny\n</"
      "tool_response><|im_end|>\n<|im_start|>assistant\n");
  // Without tools: chatml, the system message included.
  messages.resize(2);
  auto plain = (*tmpl)->Render(messages, ChatRenderOptions{});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(KvsTinyTokenizer, RoundTripsOneMebibyte) {
  auto tok = LoadBundled();
  ASSERT_NE(tok, nullptr);
  testing::ExpectRoundTrip(*tok, testing::BuildCorpus(), "kvs-tiny");
}

}  // namespace
}  // namespace kvserve::tokenizer
