// Text normalizers of a Hugging Face tokenizer.json, applied to each stretch of input text
// between added tokens before pre-tokenization:
//
//   input piece ──► step 1 ──► step 2 ──► ... ──► normalized piece
//   (Sequence flattens into this list; an absent normalizer is the empty list)
//
// Supported steps: Prepend (only to a non-empty piece), Replace (literal or regex pattern),
// and, when built with ICU, the Unicode normalization forms NFC, NFD, NFKC and NFKD.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"

namespace kvserve::tokenizer {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  // Rewrites `text` in place; text is valid UTF-8 before and after.
  virtual void Apply(std::string& text) const = 0;
};

class Normalizer {
 public:
  Normalizer() = default;  // identity

  static std::unique_ptr<NormalizerStep> Prepend(std::string prefix);
  static std::unique_ptr<NormalizerStep> ReplaceLiteral(std::string pattern, std::string content);
  static std::unique_ptr<NormalizerStep> ReplaceRegex(std::unique_ptr<Regex> pattern,
                                                      std::string content);
  // Fails with Unimplemented when the library was built without ICU.
  static absl::StatusOr<std::unique_ptr<NormalizerStep>> Unicode(UnicodeForm form);

  void add(std::unique_ptr<NormalizerStep> step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Replaces `text` with its normalized form.
  void Apply(std::string& text) const;

 private:
  std::vector<std::unique_ptr<NormalizerStep>> steps_;
};

}  // namespace kvserve::tokenizer
