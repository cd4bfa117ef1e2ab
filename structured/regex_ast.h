// The regular expressions structured outputs compile: a byte-level AST. Text is UTF-8, so a
// character class or `.` that admits non-ASCII characters becomes an alternation of UTF-8 byte
// sequences; every path through the AST spells valid UTF-8 when its literals do.
#pragma once

#include <bitset>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::structured {

using ByteSet = std::bitset<256>;

struct RegexNode {
  enum class Kind { kEmpty, kBytes, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;                // kBytes: one byte from the set
  std::vector<RegexNode> kids;  // kSeq, kAlt; kRepeat: the item, then optionally a separator
  int min = 0;                  // kRepeat
  int max = -1;                 // kRepeat; -1: unbounded

  static RegexNode Empty() { return {}; }
  static RegexNode Bytes(const ByteSet& set);
  static RegexNode Byte(unsigned char b);
  static RegexNode Literal(std::string_view text);
  static RegexNode Seq(std::vector<RegexNode> kids);
  static RegexNode Alt(std::vector<RegexNode> kids);
  static RegexNode Repeat(RegexNode kid, int min, int max);
  // min..max (-1: unbounded) copies of `item` with `separator` between them. Unbounded lists
  // build one copy of the item with a back edge, so nested JSON lists do not multiply states.
  static RegexNode SeparatedList(RegexNode item, RegexNode separator, int min, int max);
  // Any UTF-8 character except those in `ascii_excluded` (ASCII bytes only).
  static RegexNode AnyChar(const ByteSet& ascii_excluded);
};

// Parses the regex dialect vLLM's guided_regex and JSON-schema `pattern`s use (Python `re`
// syntax): literals, escapes (\d \w \s \D \W \S \n \t \r \f \v \xHH \uHHHH and escaped
// punctuation), classes [...] (ranges of ASCII, single non-ASCII characters, negation), `.`,
// groups (...) and (?:...), alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms match the
// same strings), and ^/$ at the ends (the whole output must match anyway). Backreferences,
// lookaround and named groups are InvalidArgument naming the construct and its offset.
absl::StatusOr<RegexNode> ParseRegex(std::string_view pattern);

// `text` with every regex metacharacter escaped.
std::string RegexEscape(std::string_view text);

}  // namespace kvserve::structured
