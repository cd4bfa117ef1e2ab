// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) for the
// pre-tokenizer's split regexes and the Replace normalizer. PCRE2 types stay in regex.cc.
//
// A Regex is immutable after Compile and safe to use from many threads at once: each FindAll
// call brings its own match data.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

struct ByteSpan {
  uint32_t begin;
  uint32_t end;
};

class Regex {
 public:
  // Errors name the pattern and PCRE2's message with the offset it points at.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A pattern matching `literal` exactly (metacharacters escaped).
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends to `out` every non-overlapping, non-empty match in `text`, left to right (after an
  // empty match the search retries at the same place asking for a non-empty one, as Perl does).
  // `text` must be valid UTF-8 (the tokenizer sanitises its input first).
  void FindAll(std::string_view text, std::vector<ByteSpan>& out) const;

 private:
  struct Impl;
  explicit Regex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::tokenizer
