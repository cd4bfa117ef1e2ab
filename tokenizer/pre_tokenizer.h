// Pre-tokenizers of a Hugging Face tokenizer.json: they cut a normalized piece of text into the
// "words" that BPE then encodes independently (no merge ever crosses a word boundary).
//
//   PieceList  buf_: "Hello world"          spans_: [0,11)
//     │ Split(regex, Isolated)
//     ▼
//   PieceList  buf_: "Hello world"          spans_: [0,5) [5,11)
//     │ ByteLevel(use_regex=false)
//     ▼
//   PieceList  buf_: "HelloĠworld"          spans_: [0,5) [5,12)
//
// Invariants: spans are non-empty, ordered and non-overlapping, and each is valid UTF-8.
// `first_at_text_start` says whether spans_[0] begins the caller's original input, which is
// what Metaspace's prepend_scheme "first" keys on.
//
// Supported steps: Split (literal or regex; Removed, Isolated, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel, Metaspace, Digits. Sequence flattens.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace kvserve::tokenizer {

class PieceList {
 public:
  void clear() {
    buf_.clear();
    spans_.clear();
    first_at_text_start = false;
  }
  // Appends a piece (ignored when empty).
  void add(std::string_view piece) {
    if (piece.empty()) return;
    const auto begin = static_cast<uint32_t>(buf_.size());
    buf_.append(piece);
    spans_.push_back({begin, static_cast<uint32_t>(buf_.size())});
  }
  // Builds a piece from several parts without copies in between.
  std::string& open_piece() { return buf_; }
  void close_piece(size_t begin) {
    if (buf_.size() > begin) {
      spans_.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(buf_.size())});
    }
  }
  size_t size() const { return spans_.size(); }
  std::string_view operator[](size_t i) const {
    return std::string_view(buf_).substr(spans_[i].begin, spans_[i].end - spans_[i].begin);
  }

  bool first_at_text_start = false;

 private:
  std::string buf_;
  std::vector<ByteSpan> spans_;
};

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Reads `in`, writes the new pieces into `out` (cleared by the caller).
  virtual void Apply(const PieceList& in, PieceList& out) const = 0;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

// The GPT-2 pattern ByteLevel(use_regex=true) splits with.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no steps: each piece is one word

  static std::unique_ptr<PreTokenizerStep> Split(std::unique_ptr<Regex> pattern,
                                                 SplitBehavior behavior, bool invert);
  // `gpt2_regex` must be the compiled kGpt2SplitPattern when use_regex is true (else null).
  static std::unique_ptr<PreTokenizerStep> ByteLevel(bool add_prefix_space,
                                                     std::unique_ptr<Regex> gpt2_regex);
  static std::unique_ptr<PreTokenizerStep> Metaspace(std::string replacement, PrependScheme scheme,
                                                     bool split);
  static std::unique_ptr<PreTokenizerStep> Digits(std::unique_ptr<Regex> digit_regex,
                                                  bool individual_digits);

  void add(std::unique_ptr<PreTokenizerStep> step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }

  // Runs every step; the result ends up in `pieces`, `scratch` is clobbered.
  void Apply(PieceList& pieces, PieceList& scratch) const;

 private:
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
};

}  // namespace kvserve::tokenizer
