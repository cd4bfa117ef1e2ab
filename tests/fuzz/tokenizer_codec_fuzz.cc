// libFuzzer target: encode + incremental decode of arbitrary bytes through two real
// tokenizers (the bundled kvs-tiny one: SentencePiece-style with byte fallback; and a GPT-2
// style byte-level fixture). The first byte picks the tokenizer and the mode:
//   text mode: encode(rest) must give in-vocabulary ids; decode(ids) is valid UTF-8 and, for
//              valid UTF-8 input the tokenizer can represent exactly, equals the input;
//   ids mode:  rest is read as int32 ids (any value, out of range included).
// In both, feeding the ids one at a time to an IncrementalDetokenizer and flushing gives
// exactly decode(ids) (the invariant incremental_detokenizer.h states), and never broken UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using kvserve::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> Load(const char* relative) {
  auto tok = Tokenizer::FromFile(std::string(KVSERVE_SOURCE_DIR) + "/" + relative);
  if (!tok.ok()) __builtin_trap();  // the fixtures must load
  return *std::move(tok);
}

const Tokenizer& Pick(int which) {
  static const auto* spm = Load("models/kvs-tiny/tokenizer.json").release();
  static const auto* byte_level = Load("tests/fixtures/tokenizer/byte_level.json").release();
  return which == 0 ? *spm : *byte_level;
}

void CheckStreaming(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                    bool at_text_start) {
  const std::string whole = tok.decode(ids, skip_special);
  if (!kvserve::tokenizer::IsValidUtf8(whole)) __builtin_trap();
  if (!at_text_start) return;  // decode() always starts a text; only then must they agree
  kvserve::tokenizer::IncrementalDetokenizer detok(
      tok, {.skip_special = skip_special, .at_text_start = at_text_start});
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.feed(id);
    if (!kvserve::tokenizer::IsValidUtf8(piece)) __builtin_trap();
    if (detok.pending_bytes() > 3) __builtin_trap();
    streamed += piece;
  }
  streamed += detok.flush();
  if (streamed != whole) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const Tokenizer& tok = Pick(mode & 1);
  const bool ids_mode = (mode & 2) != 0;
  const bool skip_special = (mode & 4) != 0;
  const bool add_special = (mode & 8) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids;
  if (ids_mode) {
    ids.resize(rest.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
  } else {
    ids = tok.encode(rest, add_special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    // Exact round trip where the tokenizer can represent the text: valid UTF-8, and for the
    // SentencePiece-style one no U+2581 (its space marker) and no '<' (added-token text
    // splits the normalizer's prefix space differently; see tokenizer.h).
    const bool spm = (mode & 1) == 0;
    const bool representable = kvserve::tokenizer::IsValidUtf8(rest) &&
                               (!spm || (rest.find("\xE2\x96\x81") == std::string_view::npos &&
                                         rest.find('<') == std::string_view::npos));
    if (representable && !add_special && tok.decode(ids, /*skip_special=*/false) != rest) __builtin_trap();
  }
  CheckStreaming(tok, ids, skip_special, /*at_text_start=*/true);
  return 0;
}
