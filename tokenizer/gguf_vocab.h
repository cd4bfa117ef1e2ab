// A GGUF file's vocabulary (llama.cpp's `tokenizer.ggml.*` metadata) as a plain value, and the
// two conversions kvserve needs: GGUF vocabulary -> Tokenizer (serving a GGUF model) and
// tokenizer.json -> GGUF vocabulary (exporting one). The GGUF reader and writer fill and read
// the struct; nothing here knows the container.
//
//   tokenizer.ggml.model  "gpt2"  byte-level BPE:  tokens (byte-level text), ranked merges
//                                 "a b", pre = a pre-tokenizer NAME (gguf_pre_tokenizer.h)
//                         "llama" SentencePiece:   tokens with scores, no merges; the encoder
//                                 joins the adjacent pair whose join is a token of highest
//                                 score (spm_merges.h), spaces become "▁" (+ one in front when
//                                 add_space_prefix), unknown characters fall back to <0xXX>
//
//   token_type   1 normal   2 unknown   3 control   4 user-defined   5 unused   6 byte
//                types 2, 3 and 4 are added tokens (cut out of the text before BPE, as llama.cpp
//                does; 2 and 3 are special: decode(skip_special) drops them)
//
// The ids of TokenizerFromGgufVocab(GgufVocabFromTokenizerJson(json)) equal those of the
// tokenizer.json for the files GgufVocabFromTokenizerJson accepts; what a GGUF vocabulary
// cannot say (a Metaspace pre-tokenizer, lstrip/rstrip added tokens, an unknown split regex)
// is refused by name rather than written approximately.
//
// One thing GGUF cannot say is kept in a kvserve extension: `normalized_token_ids`, the added
// tokens that match inside normalized text (tokenizer.json "normalized": true, e.g. the bundled
// model's <|im_start|>, which SentencePiece reads as a user-defined symbol: "▁" before it stays
// a separate piece and no "▁" is added after it). Files from llama.cpp's converter do not have
// it; their added tokens all match in the raw text, as llama.cpp matches them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace kvserve::tokenizer {

enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;                   // tokenizer.ggml.pre (gpt2; empty: the key is absent)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, by id
  std::vector<float> scores;         // tokenizer.ggml.scores (required for llama)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index (gpt2)
  // tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id (GGUF stores u32).
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
  std::optional<int64_t> eot_id;
  std::optional<int64_t> unknown_id;
  std::optional<int64_t> padding_id;
  // Further ids that end generation (eom_token_id, generation_config.json's extra eos ids).
  std::vector<int64_t> eog_ids;
  // tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix. Absent: llama.cpp's
  // defaults (llama: BOS yes, EOS no, space prefix yes; gpt2: per pre name, see
  // gguf_pre_tokenizer.h, EOS no).
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<bool> add_space_prefix;
  std::optional<std::string> chat_template;  // tokenizer.chat_template
  // kvserve extension (see above); suggested key: kvserve.tokenizer.normalized_token_ids (i32[]).
  std::vector<int64_t> normalized_token_ids;
};

// The Tokenizer a GGUF vocabulary describes (chat template and BOS/EOS policy included).
// Errors name the key and the token, merge or id at fault; an unknown model ("bert") or pre
// name is refused by name.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufVocab(const GgufVocab& vocab);

// What llama.cpp's converter writes for a tokenizer.json (with tokenizer_config.json /
// generation_config.json settings in `config`): gpt2 style for byte-level BPE (pre name chosen
// from the pre-tokenizer's regexes), llama style for SentencePiece-style BPE (Prepend/Replace
// "▁" normalizer, byte fallback) with score = -(rank of the first merge producing the token)
// (tokens no merge produces: -(number of merges + id), below every merged token). Ids without
// a token (holes) become "<unused_ID>" tokens of type unused. Anything the GGUF vocabulary
// could not reproduce exactly is refused with an error naming it.
absl::StatusOr<GgufVocab> GgufVocabFromTokenizerJson(std::string_view tokenizer_json,
                                                     const TokenizerDirConfig& config);

// Appends "<unused_ID>" tokens of type unused (score 0) up to `vocab_size` tokens: llama.cpp
// takes the vocabulary size from the token list, which must then match the embedding rows of a
// model whose vocab_size exceeds its tokenizer. Fails if the vocabulary is already larger.
absl::Status PadGgufVocab(GgufVocab& vocab, int64_t vocab_size);

}  // namespace kvserve::tokenizer
