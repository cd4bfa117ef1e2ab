// Decoding, precomputed: every id's decoder chain is run once at load time, leaving the raw
// bytes the token stands for. Decoding is then "concatenate, drop up to N leading strip bytes
// at the start of the output, repair UTF-8", which is also exactly what the incremental
// detokenizer needs (a token's bytes may be half of a UTF-8 character).
//
//   ids:    [ 1467   , 263  , 0xE2 , 0x82 , 0xAC ]
//   bytes:  [ " Hello", " w" , E2   , 82   , AC   ]   <- per-id table, built once
//   output: "Hello w€"                                <- leading " " stripped (SPM), then UTF-8
//
// Supported decoder steps (Sequence flattens): ByteLevel, Replace (literal), ByteFallback, Fuse,
// Strip (start only, one ASCII character), Metaspace. Strip and Metaspace act on the start of
// the whole output (HF applies them after Fuse, or to token 0, which is the same thing).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/pre_tokenizer.h"

namespace kvserve::tokenizer {

struct DecodeStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind;
  std::string pattern;  // kReplace: literal to replace; kMetaspace: the replacement character
  std::string content;  // kReplace: replacement; kStrip: the character stripped
  int start = 0;        // kStrip: how many leading `content` to strip
  int stop = 0;         // kStrip: trailing count (only 0 is supported)
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
};

class TokenDecoder {
 public:
  TokenDecoder() = default;
  // tokens[id] is the token text of id (empty for ids nothing defines).
  static absl::StatusOr<TokenDecoder> Create(std::span<const std::string_view> tokens,
                                             std::span<const DecodeStep> steps);

  // The bytes of one token (empty for ids out of range).
  std::string_view bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) + 1 >= offsets_.size()) return {};
    return std::string_view(data_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  // Up to strip_count() copies of strip_char() are dropped from the start of the output.
  char strip_char() const { return strip_char_; }
  int strip_count() const { return strip_count_; }

 private:
  std::string data_;
  std::vector<uint32_t> offsets_;  // id -> [offsets_[id], offsets_[id+1]) in data_
  char strip_char_ = ' ';
  int strip_count_ = 0;
};

}  // namespace kvserve::tokenizer
