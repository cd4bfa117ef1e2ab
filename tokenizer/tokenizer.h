// Tokenizer: a Hugging Face tokenizer.json with a BPE model, byte-level (GPT-2, Llama-3, Qwen2)
// or SentencePiece-style (Llama-2, Mistral, kvs-tiny: Prepend/Replace or Metaspace, byte
// fallback). Immutable once built; every method is const and safe to call from many threads.
//
// encode(text):
//
//   text ─► UTF-8 repair ─► split on added tokens (not normalized) ─┬─► [token id]
//                                                                   └─► text piece
//     text piece ─► normalizer ─► split on added tokens (normalized) ─┬─► [token id]
//                                                                     └─► pre-tokenizer ─► words
//     word ─► BPE (ranked merges, byte fallback / unk) ─► ids
//
// decode(ids) concatenates each id's precomputed bytes (see token_decoder.h), strips the
// decoder's leading space at the start of the output, and repairs UTF-8 with U+FFFD.
//
// NOTE: a `normalized` added token is matched on its raw content inside normalized text (as
// SentencePiece matches user-defined symbols), not on its normalized form as HF tokenizers does.
// With a Prepend("▁") normalizer the two differ ("a <|im_end|>" gives "▁a", "▁", <|im_end|>
// here, "▁a", <|im_end|> there); the SentencePiece reading is the one the bundled model was
// trained with (tests/fixtures/tokenizer_kvs_tiny.json pins it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_decoder.h"
#include "tokenizer/tokenizer_config.h"

namespace kvserve::tokenizer {

struct TokenizerParts;
struct EncodeScratch;  // per-call buffers, defined in tokenizer.cc

class Tokenizer {
 public:
  // `config` carries tokenizer_config.json / generation_config.json settings (BOS/EOS policy,
  // chat template); an empty one leaves tokenizer.json's post-processor in charge.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                             const TokenizerDirConfig& config = {});
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                             const TokenizerDirConfig& config = {});
  // Assembles a tokenizer from parts built elsewhere (a GGUF vocabulary: gguf_vocab.h).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromParts(TokenizerParts parts,
                                                              const TokenizerDirConfig& config);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Ill-formed UTF-8 in `text` is encoded as U+FFFD. add_special adds the BOS/EOS policy's ids
  // (tokenizer_config.json's add_bos_token/add_eos_token, else the post-processor's).
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  // Ids outside the vocabulary decode to nothing. skip_special drops added tokens marked special.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // Added tokens first, then the BPE vocabulary.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's text as stored in tokenizer.json (empty for unknown ids).
  std::string_view id_to_token(int32_t id) const;
  // One past the largest id (vocabulary and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(special_.size()); }
  bool is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
  }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  // The primary end-of-sequence id; eos_ids() lists every id that ends generation
  // (tokenizer_config.json's eos_token first, then generation_config.json's).
  std::optional<int32_t> eos_id() const {
    return eos_ids_.empty() ? std::nullopt : std::optional<int32_t>(eos_ids_.front());
  }
  std::span<const int32_t> eos_ids() const { return eos_ids_; }
  // Token texts for chat templates ("" when unknown).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // tokenizer_config.json's Jinja chat template ("" when none).
  const std::string& chat_template() const { return chat_template_; }

  // What the incremental detokenizer needs: the raw bytes of one token (possibly part of a UTF-8
  // character) and the start-of-output strip rule.
  const TokenDecoder& token_decoder() const { return decoder_; }

 private:
  Tokenizer() = default;
  absl::Status Init(TokenizerParts parts, const TokenizerDirConfig& config);
  void EncodePiece(std::string_view piece, bool at_text_start, EncodeScratch& s,
                   std::vector<int32_t>& out) const;

  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  TokenDecoder decoder_;
  AddedTokenMatcher raw_added_;         // matched before normalization
  AddedTokenMatcher normalized_added_;  // matched in normalized text
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  std::vector<std::string> added_content_;  // id -> content for added ids, else empty
  std::vector<bool> special_;               // id -> special added token
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
};

// Loads <dir>/tokenizer.json with <dir>/tokenizer_config.json and <dir>/generation_config.json
// (both optional) and, if tokenizer_config.json has no template, <dir>/chat_template.jinja.
// A GGUF model path (gguf/gguf_source.h) is read from its tokenizer.ggml.* metadata instead.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerDir(const std::string& dir);

}  // namespace kvserve::tokenizer
