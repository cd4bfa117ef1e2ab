// Added tokens (special tokens such as "<s>" or "<|im_start|>", and user-added words) are cut out
// of the text before normalization and BPE, so they can never be split or merged with
// neighbouring text:
//
//   "Hi<|im_end|>\nok"  ──Split──►  [text "Hi"] [token 4] [text "\nok"]
//
// Matching is leftmost-longest: at the first position where any token matches, the longest
// token there wins. Candidates are bucketed by first byte, longest first.
//
// lstrip/rstrip widen a match over adjacent ASCII whitespace; single_word rejects a match glued
// to a word character (ASCII letters, digits and '_', and, as an approximation of Unicode
// letters, any non-ASCII character).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;     // skipped by decode(..., skip_special=true)
  bool normalized = false;  // matched in normalized text (after Prepend/Replace/...)
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

struct TextSegment {
  uint32_t begin;  // byte range of the input
  uint32_t end;
  int32_t token_id;  // -1: plain text to encode; else the added token matched there
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Keeps the tokens with non-empty content. Content must be valid UTF-8.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // Replaces `out` with the segments of `text` in order; they cover `text` exactly and no text
  // segment is empty.
  void Split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Entry {
    std::string content;
    int32_t id;
    bool lstrip;
    bool rstrip;
    bool single_word;
  };
  std::vector<Entry> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace kvserve::tokenizer
