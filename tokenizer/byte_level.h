// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE: every byte is
// shown as one Unicode character so the vocabulary never contains raw control bytes or spaces.
//
//   bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF  -> the code point with the same value
//   the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) -> U+0100, U+0101, ... in byte order
//
// The table is a constant computed at compile time, so there is no mutable state.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve::tokenizer {

inline constexpr char32_t kByteLevelExtraBase = 0x100;
inline constexpr int kByteLevelExtraCount = 68;

struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_char;
  std::array<uint8_t, kByteLevelExtraCount> extra_to_byte;  // U+0100 + i -> byte
};

constexpr ByteLevelTable MakeByteLevelTable() {
  ByteLevelTable t{};
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) {
      t.byte_to_char[b] = static_cast<char32_t>(b);
    } else {
      t.byte_to_char[b] = kByteLevelExtraBase + static_cast<char32_t>(extra);
      t.extra_to_byte[extra++] = static_cast<uint8_t>(b);
    }
  }
  return t;
}

inline constexpr ByteLevelTable kByteLevel = MakeByteLevelTable();

// Appends the byte-level spelling of `bytes` (one code point per byte, UTF-8 encoded).
void AppendByteLevel(std::string_view bytes, std::string& out);

// The byte a byte-level character stands for, or nullopt if `cp` is not in the table.
std::optional<uint8_t> ByteLevelCharToByte(char32_t cp);

// Inverse of AppendByteLevel for one token. nullopt if some character is not a byte-level
// character (an added token such as "<|im_start|>" written in plain text is one of those only
// if it uses characters outside the table).
std::optional<std::string> ByteLevelToBytes(std::string_view token);

}  // namespace kvserve::tokenizer
