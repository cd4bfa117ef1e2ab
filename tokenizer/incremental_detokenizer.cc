#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               DetokenizerOptions options)
    : tokenizer_(&tokenizer),
      options_(options),
      strip_left_(options.at_text_start ? tokenizer.token_decoder().strip_count() : 0) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
  std::string out;
  if (options_.skip_special && tokenizer_->is_special(id)) return out;
  std::string_view bytes = tokenizer_->token_decoder().bytes(id);
  // The strip only looks at the first bytes of the whole output; once a byte that is not the
  // strip character has been seen (or enough were dropped), it is over.
  while (strip_left_ > 0 && !bytes.empty()) {
    if (bytes.front() != tokenizer_->token_decoder().strip_char()) {
      strip_left_ = 0;
      break;
    }
    bytes.remove_prefix(1);
    --strip_left_;
  }
  if (bytes.empty()) return out;
  strip_left_ = 0;
  pending_.append(bytes);
  const size_t complete = CompleteUtf8Prefix(pending_);
  if (complete == 0) return out;
  AppendUtf8Lossy(std::string_view(pending_).substr(0, complete), out);
  pending_.erase(0, complete);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  AppendUtf8Lossy(pending_, out);
  pending_.clear();
  strip_left_ = options_.at_text_start ? tokenizer_->token_decoder().strip_count() : 0;
  return out;
}

}  // namespace kvserve::tokenizer
