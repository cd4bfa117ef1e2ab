// Streams text out of generated ids one id at a time, for SSE / gRPC chunks.
//
//   feed(id) ─► pending_ += bytes(id) ─► [strip leading space, once, at stream start]
//            ─► emit the longest prefix that does not end inside a UTF-8 character
//            ─► keep the rest (at most 3 bytes) in pending_
//   flush()  ─► emit pending_ (an unfinished character becomes U+FFFD), reset
//
// Invariant: the concatenation of every feed() and the final flush() equals
// Tokenizer::decode(all ids) — both cut and repair UTF-8 by the same maximal-subpart rule — so
// a stream never carries broken UTF-8, even when a character spans several byte-fallback or
// byte-level tokens.
//
// Not thread-safe: one detokenizer per stream, driven by that stream's consumer.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {

struct DetokenizerOptions {
  bool skip_special = true;
  // True when the ids start a text (a chat reply, the start of a completion): the decoder's
  // leading-space strip (SentencePiece "▁Hello" -> "Hello") applies to the first bytes.
  // False when they continue text the client already has, so " world" keeps its space.
  bool at_text_start = true;
};

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive the detokenizer.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options = {});

  // The text completed by this id (often empty while a character is still incomplete).
  std::string feed(int32_t id);
  // The held-back tail as text; the detokenizer then starts over (a new text start).
  std::string flush();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DetokenizerOptions options_;
  int strip_left_;       // leading strip characters still to drop at the start
  std::string pending_;  // incomplete UTF-8 tail
};

}  // namespace kvserve::tokenizer
