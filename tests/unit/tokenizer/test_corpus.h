// The 1 MiB round-trip corpus and check, shared by the fixture tokenizers' test and the bundled
// model's. The text is built deterministically from what Debian ships (licence texts, the word
// list when installed) plus generated accented Latin, Cyrillic, Greek, Arabic, Devanagari, CJK,
// Hangul and emoji (with modifiers, ZWJ sequences and flags). It contains no U+2581 ("▁") and no
// special-token text, so SentencePiece-style tokenizers round-trip it exactly.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tokenizer/test_util.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/utf8.h"

namespace kvserve::tokenizer::testing {

inline constexpr size_t kTextBytes = 1 << 20;

inline std::vector<std::string> Utf8Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Scan scan = ScanUtf8(s, pos);
    out.emplace_back(s.substr(pos, scan.length));
    pos += scan.length;
  }
  return out;
}

inline std::string GeneratedUnicode(size_t bytes) {
  const std::vector<std::vector<std::string>> pools = {
      Utf8Chars("àáâäãåæçèéêëìíîïñòóôöøùúûüýÿßœŒÉÈÀÇŠŽčęłńśźżőű"),
      Utf8Chars("абвгдежзийклмнопрстуфхцчшщъыьэюяПРИВЕТ"),
      Utf8Chars("αβγδεζηθικλμνξοπρστυφχψωΩΣΔ"),
      Utf8Chars("日本語中文字漢字東京大学北京上海你好世界のをはがでにとアイウエオカキク"),
      Utf8Chars("한국어문자열테스트입니다"),
      Utf8Chars("مرحبابالعالم"),
      Utf8Chars("नमस्तेदुनिया"),
      {"😀", "😃", "🎉", "👍🏽", "🚀", "❤️", "🇫🇷", "🇯🇵", "👩‍👩‍👧",
       "🧑🏿‍💻", "✨", "🤖"},
      Utf8Chars("0123456789"),
      Utf8Chars(".,;:!?'\"()[]{}-—–…«»/\\@#$%^&*+=~`|"),
  };
  const std::vector<std::string> spaces = {" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n"};
  std::mt19937 rng(20240601);
  std::string out;
  while (out.size() < bytes) {
    const auto& pool = pools[rng() % pools.size()];
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int i = 0; i < n; ++i) out += pool[rng() % pool.size()];
    out += spaces[rng() % spaces.size()];
  }
  return out;
}

// Exactly kTextBytes bytes (cut at a character boundary, then padded with ASCII).
inline std::string BuildCorpus() {
  std::string text;
  std::vector<std::filesystem::path> licences;
  const std::filesystem::path dir = "/usr/share/common-licenses";
  if (std::filesystem::is_directory(dir)) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file()) licences.push_back(e.path());
    }
  }
  std::sort(licences.begin(), licences.end());
  for (const auto& p : licences) {
    if (text.size() > kTextBytes / 4) break;
    text += ReadFileOrDie(p.string());
  }
  if (std::filesystem::exists("/usr/share/dict/words")) {
    const std::string words = ReadFileOrDie("/usr/share/dict/words");
    // Every 3rd word, joined by spaces with a newline now and then, up to ~half the corpus.
    size_t count = 0;
    for (size_t pos = 0; pos < words.size() && text.size() < kTextBytes / 2;) {
      size_t nl = words.find('\n', pos);
      if (nl == std::string::npos) nl = words.size();
      if (count++ % 3 == 0) {
        text.append(words, pos, nl - pos);
        text += count % 40 == 0 ? "\n" : " ";
      }
      pos = nl + 1;
    }
  }
  text += GeneratedUnicode(kTextBytes - std::min(text.size(), kTextBytes) + 64);
  text.resize(CompleteUtf8Prefix(text.substr(0, kTextBytes)));
  text.append(kTextBytes - text.size(), '.');
  return text;
}

// decode(encode(text)) == text, and streaming every id through an IncrementalDetokenizer gives
// the same text. Prints the timings.
inline void ExpectRoundTrip(const Tokenizer& tok, const std::string& text,
                            const std::string& name) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false);
  const auto t1 = std::chrono::steady_clock::now();
  const std::string back = tok.decode(ids, /*skip_special=*/false);
  const auto t2 = std::chrono::steady_clock::now();

  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("[ timing ] %s: %zu bytes -> %zu ids, encode %.0f ms, decode %.0f ms\n", name.c_str(),
              text.size(), ids.size(), ms(t1 - t0), ms(t2 - t1));
  ASSERT_EQ(back.size(), text.size());
  if (back != text) {
    const auto diff = std::mismatch(back.begin(), back.end(), text.begin());
    const size_t at = static_cast<size_t>(diff.first - back.begin());
    FAIL() << "first difference at byte " << at << ": got \"" << back.substr(at, 40) << "\" want \""
           << text.substr(at, 40) << "\"";
  }

  // The streaming path agrees on the same million-token scale.
  IncrementalDetokenizer detok(tok, {.skip_special = false, .at_text_start = true});
  std::string streamed;
  streamed.reserve(text.size());
  for (int32_t id : ids) streamed += detok.feed(id);
  streamed += detok.flush();
  EXPECT_TRUE(streamed == text);
}

}  // namespace kvserve::tokenizer::testing
