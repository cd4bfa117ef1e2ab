// libFuzzer target: loading a Hugging Face tokenizer.json (Tokenizer::FromJson) from arbitrary
// bytes. Every input either builds a tokenizer or gives an error status (InvalidArgument naming the
// JSON path, or Unimplemented for an unsupported component); nothing may crash, hang, leak or trip a sanitizer. A tokenizer that loads is then used:
// it must encode a fixed text (BOS/EOS included) into in-vocabulary ids and decode its whole
// vocabulary range (plus out-of-range ids) to valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = kvserve::tokenizer::Tokenizer::FromJson(text);
  if (!tok.ok()) return 0;  // any error status is a clean refusal (invalid, unsupported)
  const auto& t = **tok;
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = t.encode("Hello, wörld! <s>  12 \xF0\x9F\x98\x80\n\t\xFF", special);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) __builtin_trap();
    if (!kvserve::tokenizer::IsValidUtf8(t.decode(ids, /*skip_special=*/!special))) __builtin_trap();
  }
  std::vector<int32_t> all;
  const int32_t n = t.vocab_size() < 4096 ? t.vocab_size() : 4096;
  for (int32_t id = -2; id < n + 2; ++id) all.push_back(id);
  if (!kvserve::tokenizer::IsValidUtf8(t.decode(all, /*skip_special=*/false))) __builtin_trap();
  return 0;
}
