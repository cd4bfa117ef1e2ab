// GGUF vocabularies: tokenizer.json -> GgufVocab -> Tokenizer gives the tokenizer.json's ids on a
// corpus of tricky text for every fixture (and variants made here for each pre-tokenizer name);
// hand-built GGUF vocabularies check the SentencePiece rule, the "default" pre-tokenizer and the
// llama.cpp reading of added tokens against results worked out by hand; bad input is refused
// with an error naming it.
#include "tokenizer/gguf_vocab.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tests/unit/tokenizer/test_corpus.h"
#include "tests/unit/tokenizer/test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_pre_tokenizer.h"

namespace kvserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using testing::FixturePath;
using ::testing::HasSubstr;
using testing::ReadFileOrDie;

const std::string kSp = "\xE2\x96\x81";  // "▁"

std::vector<std::string> TrickyTexts(const Tokenizer& hf) {
  std::vector<std::string> texts = {
      "",
      " ",
      "   ",
      "a",
      " a",
      "   leading",
      "trailing   ",
      "multiple   spaces  here",
      "\n",
      "\n\nline one\nline two\n\n",
      " \n \t mixed\t\twhitespace \r\n",
      "Hello, world! How's it going? I'm fine; we'll see. DON'T SHOUT",
      "0 12 123 1234 12345 3.14159 1,000,000 -7e10",
      "日本語のテキストと中文和한국어",
      "emoji 👍🏽 🚀🇫🇷 👩‍👩‍👧 ❤️",
      "invalid \xff\xfe utf-8 \xc3 here \xe2\x82",
      "café naïve Œuvre ẞ",
      "e\xcc\x81 decomposed vs \xc3\xa9",  // NFC matters for qwen2
      "x = a+b*(c-d)/e; // comment\n\tif (x) { return; }",
      "https://example.com/path?q=1&r=2#frag",
      "already " + kSp + " has the space mark" + kSp + kSp,
      "<0x41> literal byte-token text",
      "camelCaseWord HTTPSConnection PascalCase",
      std::string(300, 'a') + " " + std::string(200, ' ') + "z",
  };
  // Every added token alone, glued to text, spaced and repeated.
  for (int32_t id = 0; id < hf.vocab_size(); ++id) {
    if (!hf.is_special(id)) continue;
    const std::string t(hf.id_to_token(id));
    for (const std::string& s :
         {t, "a" + t + "b", "x " + t + " y", t + t + "\n" + t, t + "user\nhi there" + t + "\n"}) {
      texts.push_back(s);
    }
  }
  // English prose (Debian's licence texts, when installed) and generated multilingual text, in
  // pieces of assorted sizes.
  std::string gen;
  const std::string licence = "/usr/share/common-licenses/GPL-3";
  if (std::filesystem::exists(licence)) gen = ReadFileOrDie(licence).substr(0, 48 * 1024);
  gen += testing::GeneratedUnicode(48 * 1024);
  size_t pos = 0;
  for (size_t len = 1; pos < gen.size(); len = len * 3 % 997 + 1) {
    size_t end = CompleteUtf8Prefix(gen.substr(0, std::min(gen.size(), pos + len)));
    if (end <= pos) end = pos + ScanUtf8(gen, pos).length;  // at least one character
    texts.push_back(gen.substr(pos, end - pos));
    pos = end;
  }
  return texts;
}

// The tokenizer.json's tokenizer and the one its GGUF vocabulary gives agree on everything.
void ExpectSameTokenizer(const std::string& json, const TokenizerDirConfig& config,
                         const std::string& want_model, const std::string& want_pre) {
  auto hf = Tokenizer::FromJson(json, config);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto vocab = GgufVocabFromTokenizerJson(json, config);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->model, want_model);
  EXPECT_EQ(vocab->pre, want_pre);
  auto gg = TokenizerFromGgufVocab(*vocab);
  ASSERT_TRUE(gg.ok()) << gg.status();
  const Tokenizer& a = **hf;
  const Tokenizer& b = **gg;

  ASSERT_EQ(a.vocab_size(), b.vocab_size());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    ASSERT_EQ(a.id_to_token(id), b.id_to_token(id)) << "id " << id;
    ASSERT_EQ(a.is_special(id), b.is_special(id)) << "id " << id;
    ASSERT_EQ(a.token_decoder().bytes(id), b.token_decoder().bytes(id)) << "id " << id;
  }
  EXPECT_EQ(a.bos_id(), b.bos_id());
  EXPECT_EQ(a.eos_id(), b.eos_id());
  EXPECT_EQ(std::vector<int32_t>(a.eos_ids().begin(), a.eos_ids().end()),
            std::vector<int32_t>(b.eos_ids().begin(), b.eos_ids().end()));
  EXPECT_EQ(a.chat_template(), b.chat_template());

  size_t checked = 0;
  for (const std::string& text : TrickyTexts(a)) {
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> want = a.encode(text, add_special);
      const std::vector<int32_t> got = b.encode(text, add_special);
      ASSERT_EQ(got, want) << "text: \"" << text << "\" add_special=" << add_special;
      for (bool skip : {false, true}) {
        ASSERT_EQ(b.decode(got, skip), a.decode(want, skip)) << "text: \"" << text << "\"";
      }
      ++checked;
    }
    // Text without added tokens or "▁" decodes back to itself (invalid UTF-8 as U+FFFD).
    std::string repaired;
    AppendUtf8Lossy(text, repaired);
    bool plain = repaired.find(kSp) == std::string::npos;
    for (int32_t id = 0; id < a.vocab_size() && plain; ++id) {
      if (a.is_special(id)) plain = repaired.find(a.id_to_token(id)) == std::string::npos;
    }
    // (Unless the tokenizer normalizes it: NFC, Qwen2's, rewrites decomposed accents.)
    if (plain && a.decode(a.encode(text, false), false) == repaired) {
      EXPECT_EQ(b.decode(b.encode(text, false), false), repaired);
    }
  }
  EXPECT_GT(checked, 400u);
}

std::string Fixture(const std::string& name) { return ReadFileOrDie(FixturePath(name + ".json")); }

TEST(GgufVocabRoundTrip, ByteLevelGpt2) {
  ExpectSameTokenizer(Fixture("byte_level"), {}, "gpt2", "gpt-2");
}

TEST(GgufVocabRoundTrip, Llama3) {
  ExpectSameTokenizer(Fixture("llama3_style"), {}, "gpt2", "llama-bpe");
}

TEST(GgufVocabRoundTrip, SentencePieceByteFallback) {
  ExpectSameTokenizer(Fixture("spm_bytefallback"), {}, "llama", "");
}

// llama3_style.json with another family's split regex (and that family's NFC / ignore_merges):
// the GGUF pre name it gets and the ids it gives.
TEST(GgufVocabRoundTrip, EveryByteLevelPreName) {
  struct Case {
    std::string_view pattern;
    bool nfc;
    bool ignore_merges;
    std::string name;
  };
  for (const Case& c : {Case{kQwen2SplitPattern, true, false, "qwen2"},
                        Case{kO200kSplitPattern, false, false, "gpt-4o"},
                        Case{kTekkenSplitPattern, false, true, "tekken"}}) {
    SCOPED_TRACE(c.name);
    auto doc = nlohmann::json::parse(Fixture("llama3_style"));
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(c.pattern);
    doc["model"]["ignore_merges"] = c.ignore_merges;
    if (c.nfc) doc["normalizer"] = {{"type", "NFC"}};
    ExpectSameTokenizer(doc.dump(), {}, "gpt2", c.name);
  }
}

TEST(GgufVocabRoundTrip, BundledModel) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny/";
  auto config = ParseTokenizerDirConfig(ReadFileOrDie(dir + "tokenizer_config.json"),
                                        ReadFileOrDie(dir + "generation_config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_FALSE(config->chat_template.empty());
  const std::string json = ReadFileOrDie(dir + "tokenizer.json");
  ExpectSameTokenizer(json, *config, "llama", "");

  auto vocab = GgufVocabFromTokenizerJson(json, *config);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->chat_template, config->chat_template);
  EXPECT_EQ(vocab->add_bos_token, true);
  EXPECT_EQ(vocab->add_eos_token, false);
  EXPECT_EQ(vocab->add_space_prefix, true);
  // <|im_start|> and <|im_end|> match inside normalized text (tokenizer.json normalized=true).
  EXPECT_THAT(vocab->normalized_token_ids, ElementsAre(3, 4));
}

TEST(PadGgufVocab, PadsWithUnusedTokensThatTextNeverProduces) {
  const std::string json = Fixture("spm_bytefallback");
  auto vocab = GgufVocabFromTokenizerJson(json, {});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const size_t n = vocab->tokens.size();
  ASSERT_TRUE(PadGgufVocab(*vocab, static_cast<int64_t>(n) + 3).ok());
  ASSERT_EQ(vocab->tokens.size(), n + 3);
  EXPECT_EQ(vocab->tokens[n + 2], absl::StrCat("<unused_", n + 2, ">"));
  EXPECT_EQ(vocab->token_types[n], 5);
  EXPECT_EQ(vocab->scores.size(), n + 3);
  auto padded = TokenizerFromGgufVocab(*vocab);
  ASSERT_TRUE(padded.ok()) << padded.status();
  auto hf = Tokenizer::FromJson(json);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ((*padded)->vocab_size(), static_cast<int32_t>(n + 3));
  const std::string text = absl::StrCat("<unused_", n, "> text");
  EXPECT_EQ((*padded)->encode(text, true), (*hf)->encode(text, true));
  EXPECT_FALSE(PadGgufVocab(*vocab, static_cast<int64_t>(n)).ok());
}

// The exporter's score rule, computed here from the JSON: -(rank of the first merge producing
// the token); byte and added tokens 0; tokens no merge produces below every merged one.
TEST(GgufVocabFromTokenizerJson, SentencePieceScoresFollowTheMergeOrder) {
  const auto doc = nlohmann::json::parse(Fixture("spm_bytefallback"));
  auto vocab = GgufVocabFromTokenizerJson(doc.dump(), {});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  std::map<std::string, size_t> first;
  const auto& merges = doc["model"]["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string m = merges[r].is_string()
                        ? merges[r].get<std::string>()
                        : merges[r][0].get<std::string>() + " " + merges[r][1].get<std::string>();
    m.erase(m.find(' '), 1);
    first.emplace(m, r);
  }
  std::set<int64_t> added;
  for (const auto& a : doc["added_tokens"]) added.insert(a["id"].get<int64_t>());
  ASSERT_EQ(vocab->scores.size(), vocab->tokens.size());
  float lowest_merged = 0;
  for (size_t id = 0; id < vocab->tokens.size(); ++id) {
    const std::string& t = vocab->tokens[id];
    const bool byte = t.size() == 6 && t.rfind("<0x", 0) == 0;
    if (added.count(static_cast<int64_t>(id))) {
      EXPECT_EQ(vocab->token_types[id], t == "<unk>" ? 2 : 3) << t;
      EXPECT_EQ(vocab->scores[id], 0.0f);
    } else if (byte) {
      EXPECT_EQ(vocab->token_types[id], 6) << t;
    } else if (auto it = first.find(t); it != first.end()) {
      EXPECT_EQ(vocab->token_types[id], 1);
      EXPECT_EQ(vocab->scores[id], -static_cast<float>(it->second)) << t;
      lowest_merged = std::min(lowest_merged, vocab->scores[id]);
    }
  }
  for (size_t id = 0; id < vocab->tokens.size(); ++id) {
    const std::string& t = vocab->tokens[id];
    if (vocab->token_types[id] == 1 && !first.count(t)) {
      EXPECT_LT(vocab->scores[id], lowest_merged);
    }
  }
}

// --------------------------------------------------------------- hand-built GGUF vocabularies

// A SentencePiece vocabulary: <unk> <s> </s> <|x|>, pieces with scores, the 256 byte tokens.
GgufVocab TinySpm() {
  GgufVocab v;
  v.model = "llama";
  auto add = [&v](std::string t, float score, int32_t type) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(score);
    v.token_types.push_back(type);
    return static_cast<int64_t>(v.tokens.size() - 1);
  };
  v.unknown_id = add("<unk>", 0, 2);
  v.bos_id = add("<s>", 0, 3);
  v.eos_id = add("</s>", 0, 3);
  add("<|x|>", 0, 3);                                                       // 3
  add(kSp, -100, 1);                                                        // 4
  for (const char* c : {"a", "b", "c", "x"}) add(c, -100, 1);               // 5..8
  add("ab", -5, 1);                                                         // 9
  add("bc", -1, 1);                                                         // 10
  add("abc", -3, 1);                                                        // 11
  add(kSp + "a", -10, 1);                                                   // 12
  add("xx", -2, 1);                                                         // 13
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0, 6);  // 14..269
  return v;
}

TEST(TokenizerFromGgufVocab, SentencePieceJoinsTheBestScoredPairFirst) {
  auto tok = TokenizerFromGgufVocab(TinySpm());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "▁abc": (b,c)=-1 beats (a,b)=-5 and (▁,a)=-10; then (a,bc)->abc=-3; "▁abc" is no token.
  EXPECT_THAT((*tok)->encode("abc", false), ElementsAre(4, 11));
  // Equal scores: the leftmost pair first ("▁" "xx" "x", not "▁" "x" "xx").
  EXPECT_THAT((*tok)->encode("xxx", false), ElementsAre(4, 13, 8));
  // Spaces become "▁"; one more in front; add_bos defaults to true for llama.
  EXPECT_THAT((*tok)->encode("a a", true), ElementsAre(1, 12, 12));
  // Byte fallback: "é" is C3 A9.
  EXPECT_THAT((*tok)->encode("é", false), ElementsAre(4, 14 + 0xC3, 14 + 0xA9));
  EXPECT_EQ((*tok)->decode((*tok)->encode("abc xxx é", false), false), "abc xxx é");
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{1, 12, 3, 2}, true), "a");
}

TEST(TokenizerFromGgufVocab, SentencePieceAddedTokensFollowLlamaCppUnlessNormalized) {
  GgufVocab v = TinySpm();
  auto raw = TokenizerFromGgufVocab(v);
  ASSERT_TRUE(raw.ok()) << raw.status();
  // llama.cpp: control tokens are cut from the raw text, and the text after one gets "▁" too.
  EXPECT_THAT((*raw)->encode("a<|x|>a", false), ElementsAre(12, 3, 12));
  // The kvserve extension: matched inside the normalized text "▁a<|x|>a".
  v.normalized_token_ids = {3};
  auto norm = TokenizerFromGgufVocab(v);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_THAT((*norm)->encode("a<|x|>a", false), ElementsAre(12, 3, 5));
  // No space prefix at all when the file says so.
  v.add_space_prefix = false;
  v.add_bos_token = false;
  auto bare = TokenizerFromGgufVocab(v);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_THAT((*bare)->encode("a", true), ElementsAre(5));
  EXPECT_EQ((*bare)->decode(std::vector<int32_t>{4, 5}, false), " a");
}

// A byte-level vocabulary: the 256 byte characters plus a few merges, whose results show where
// each pre-tokenizer cut the text.
GgufVocab TinyGpt2(std::string pre) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) {
    std::string t;
    AppendByteLevel(std::string(1, static_cast<char>(b)), t);
    v.tokens.push_back(t);
  }
  // Ranks: "3 4" first, so "1234" as one word ends as 12|34; cut into 123|4 it gives 123, 4.
  for (const char* m : {"3 4", "1 2", "12 3", "a +"}) {
    v.merges.push_back(m);
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    v.tokens.push_back(joined);
  }
  v.tokens.push_back("<|end|>");
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types.back() = 3;
  v.eos_id = static_cast<int64_t>(v.tokens.size() - 1);
  return v;
}

TEST(TokenizerFromGgufVocab, DefaultPreTokenizerIsLlamaCppsFourSplits) {
  auto gpt2 = TokenizerFromGgufVocab(TinyGpt2("gpt-2"));
  auto def = TokenizerFromGgufVocab(TinyGpt2("default"));
  auto absent = TokenizerFromGgufVocab(TinyGpt2(""));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  ASSERT_TRUE(def.ok()) << def.status();
  ASSERT_TRUE(absent.ok()) << absent.status();
  const int32_t t34 = 256, t12 = 257, t123 = 258;
  // GPT-2: "a", "+", "1234" (no merge across words; 3 4 ranks first).
  EXPECT_THAT((*gpt2)->encode("a+1234", false), ElementsAre('a', '+', t12, t34));
  // default: punctuation runs, then GPT-2, then digit runs, then groups of three ASCII digits.
  EXPECT_THAT((*def)->encode("a+1234", false), ElementsAre('a', '+', t123, '4'));
  EXPECT_EQ((*absent)->encode("a+1234", false), (*def)->encode("a+1234", false));
  // gpt2 adds no BOS by default; the control token is special and an end of sequence.
  EXPECT_THAT((*gpt2)->encode("a<|end|>", true), ElementsAre('a', 260));
  EXPECT_THAT(std::vector<int32_t>((*gpt2)->eos_ids().begin(), (*gpt2)->eos_ids().end()),
              ElementsAre(260));
  EXPECT_EQ((*gpt2)->decode((*gpt2)->encode("a+1234 é<|end|>", false), true), "a+1234 é");
}

// ---------------------------------------------------------------------------------- refusals

void ExpectError(const absl::StatusOr<std::unique_ptr<Tokenizer>>& t, const std::string& what) {
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(what));
}

TEST(TokenizerFromGgufVocab, RefusesWhatItCannotReadNamingIt) {
  GgufVocab v = TinyGpt2("gpt-2");
  v.model = "bert";
  ExpectError(TokenizerFromGgufVocab(v), "\"bert\"");
  v = TinyGpt2("deepseek-llm");
  ExpectError(TokenizerFromGgufVocab(v), "\"deepseek-llm\"");
  v = TinyGpt2("gpt-2");
  v.merges.push_back("q nope");
  ExpectError(TokenizerFromGgufVocab(v), "merge #4");
  v = TinyGpt2("gpt-2");
  v.merges.push_back("nospace");
  ExpectError(TokenizerFromGgufVocab(v), "\"nospace\"");
  v = TinyGpt2("gpt-2");
  v.token_types.pop_back();
  ExpectError(TokenizerFromGgufVocab(v), "token_type");
  v = TinyGpt2("gpt-2");
  v.token_types[7] = 9;
  ExpectError(TokenizerFromGgufVocab(v), "token 7 has unknown type 9");
  v = TinyGpt2("gpt-2");
  v.eos_id = 100000;
  ExpectError(TokenizerFromGgufVocab(v), "eos_token_id");
  v = TinyGpt2("gpt-2");
  v.add_bos_token = true;
  ExpectError(TokenizerFromGgufVocab(v), "add_bos_token");

  GgufVocab s = TinySpm();
  s.scores.pop_back();
  ExpectError(TokenizerFromGgufVocab(s), "scores");
  s = TinySpm();
  s.scores[9] = std::nanf("");
  ExpectError(TokenizerFromGgufVocab(s), "token 9");
  s = TinySpm();
  s.bos_id = -1;
  ExpectError(TokenizerFromGgufVocab(s), "bos_token_id");
  s = TinySpm();
  s.normalized_token_ids = {5};
  ExpectError(TokenizerFromGgufVocab(s), "not an added token");
  s = TinySpm();
  s.tokens.clear();
  s.scores.clear();
  s.token_types.clear();
  ExpectError(TokenizerFromGgufVocab(s), "empty");
}

TEST(GgufVocabFromTokenizerJson, RefusesWhatGgufCannotSayNamingIt) {
  auto refused = [](const nlohmann::json& doc, const std::string& what) {
    auto v = GgufVocabFromTokenizerJson(doc.dump(), {});
    ASSERT_FALSE(v.ok());
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(what));
  };
  auto spm = nlohmann::json::parse(Fixture("spm_bytefallback"));
  spm["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}};
  refused(spm, "Metaspace");
  spm = nlohmann::json::parse(Fixture("spm_bytefallback"));
  spm["added_tokens"][1]["rstrip"] = true;
  refused(spm, "rstrip");
  auto bl = nlohmann::json::parse(Fixture("llama3_style"));
  bl["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\p{L}+|\p{N}+)";
  refused(bl, "matches none");
  bl = nlohmann::json::parse(Fixture("llama3_style"));
  bl["model"]["ignore_merges"] = false;
  refused(bl, "ignore_merges");
  bl = nlohmann::json::parse(Fixture("byte_level"));
  bl["model"]["type"] = "WordPiece";
  refused(bl, "WordPiece");
  bl = nlohmann::json::parse(Fixture("byte_level"));
  bl["decoder"] = {{"type", "Fuse"}};  // neither byte-level nor SentencePiece-style
  refused(bl, "no Replace");
}

}  // namespace
}  // namespace kvserve::tokenizer
