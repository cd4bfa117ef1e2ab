// UTF-8 scanning shared by the encoder (input sanitising), the decoder (lossy output) and the
// incremental detokenizer (holding back an incomplete tail).
//
// Invalid input is replaced by U+FFFD per "maximal subpart" (Unicode 15, §3.9, the same rule as
// Rust's String::from_utf8_lossy and WHATWG). That rule is what makes incremental output equal to
// one-shot output: scanning restarted at any boundary the scanner itself stopped at produces the
// same replacements as one scan over the whole byte string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Step : uint8_t {
  kValid,       // a complete, well-formed sequence of `length` bytes
  kInvalid,     // `length` bytes (>= 1) form a maximal ill-formed subpart: one U+FFFD
  kIncomplete,  // the input ends inside a sequence that is well-formed so far
};

struct Utf8Scan {
  Utf8Step step;
  uint32_t length;
  char32_t code_point;  // valid only for kValid
};

// Scans the sequence starting at s[pos] (pos < s.size()).
Utf8Scan ScanUtf8(std::string_view s, size_t pos);

bool IsValidUtf8(std::string_view s);

// Appends s to out with every ill-formed subpart (including a truncated tail) replaced by U+FFFD.
void AppendUtf8Lossy(std::string_view s, std::string& out);

// Length of the longest prefix of s that does not end inside an incomplete-but-so-far-valid
// sequence; s.size() - result is at most 3.
size_t CompleteUtf8Prefix(std::string_view s);

void AppendUtf8(char32_t code_point, std::string& out);

}  // namespace kvserve::tokenizer
