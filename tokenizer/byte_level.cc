#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {

void AppendByteLevel(std::string_view bytes, std::string& out) {
  for (char c : bytes) AppendUtf8(kByteLevel.byte_to_char[static_cast<uint8_t>(c)], out);
}

std::optional<uint8_t> ByteLevelCharToByte(char32_t cp) {
  // Printable bytes map to themselves; the rest occupy U+0100..U+0143 in byte order.
  if (cp < 0x100) {
    if (kByteLevel.byte_to_char[cp] == cp) return static_cast<uint8_t>(cp);
    return std::nullopt;
  }
  if (cp >= kByteLevelExtraBase + kByteLevelExtraCount) return std::nullopt;
  return kByteLevel.extra_to_byte[cp - kByteLevelExtraBase];
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const Utf8Scan scan = ScanUtf8(token, pos);
    if (scan.step != Utf8Step::kValid) return std::nullopt;
    const std::optional<uint8_t> b = ByteLevelCharToByte(scan.code_point);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    pos += scan.length;
  }
  return out;
}

}  // namespace kvserve::tokenizer
