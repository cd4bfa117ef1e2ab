// Reading a Hugging Face tokenizer.json into the tokenizer's building blocks. nlohmann::json is
// confined to tokenizer_json.cc; everything it produces is a plain kvserve type.
//
// Anything malformed or unsupported is an error that names the JSON path and the problem
// ("tokenizer.json: model.merges[12]: ..."); nothing here aborts or throws.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_decoder.h"

namespace kvserve::tokenizer {

struct TokenizerParts {
  BpeModel model;
  std::vector<AddedToken> added_tokens;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::vector<DecodeStep> decode_steps;
  // The post-processor's special tokens around a single sequence (add_special=true).
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
};

absl::StatusOr<TokenizerParts> ParseTokenizerJson(std::string_view json_text);

}  // namespace kvserve::tokenizer
