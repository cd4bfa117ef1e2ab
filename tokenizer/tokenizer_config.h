// The settings of a model directory that live outside tokenizer.json: tokenizer_config.json
// (BOS/EOS policy and strings, the Jinja chat template) and generation_config.json (the ids that
// end generation). Parsed into a plain struct; nlohmann::json stays in tokenizer_config.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

struct TokenizerDirConfig {
  // tokenizer_config.json. When either add_* flag is present, it decides the special tokens
  // encode(..., add_special=true) adds (a missing one counts as false); else tokenizer.json's
  // post-processor does.
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<std::string> bos_token;  // token text, e.g. "<s>"
  std::optional<std::string> eos_token;
  std::string chat_template;  // Jinja source; empty: none
  // generation_config.json.
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // eos_token_id may be one id or a list
};

// Either text may be empty (file absent). Errors name the file and the field.
absl::StatusOr<TokenizerDirConfig> ParseTokenizerDirConfig(std::string_view tokenizer_config_json,
                                                           std::string_view generation_config_json);

}  // namespace kvserve::tokenizer
