#include "tokenizer/tokenizer_config.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace kvserve::tokenizer {
namespace {

using Json = nlohmann::json;

absl::Status Error(const char* file, const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", where, ": ", what));
}

absl::StatusOr<Json> ParseObject(std::string_view text, const char* file) {
  Json doc = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error(file, "(document)", "not valid JSON");
  if (!doc.is_object()) return Error(file, "(document)", "expected a JSON object");
  return doc;
}

// bos_token / eos_token: a string, null, or an AddedToken object {"content": ...}.
absl::StatusOr<std::optional<std::string>> TokenText(const Json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return std::optional<std::string>(c->get<std::string>());
  }
  return Error("tokenizer_config.json", key, "expected a string or {\"content\": ...}");
}

absl::StatusOr<std::optional<bool>> OptBool(const Json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return Error("tokenizer_config.json", key, "expected true or false");
  return std::optional<bool>(it->get<bool>());
}

absl::Status ParseTokenizerConfig(const Json& doc, TokenizerDirConfig& out) {
  KVS_ASSIGN_OR_RETURN(out.add_bos_token, OptBool(doc, "add_bos_token"));
  KVS_ASSIGN_OR_RETURN(out.add_eos_token, OptBool(doc, "add_eos_token"));
  KVS_ASSIGN_OR_RETURN(out.bos_token, TokenText(doc, "bos_token"));
  KVS_ASSIGN_OR_RETURN(out.eos_token, TokenText(doc, "eos_token"));
  auto it = doc.find("chat_template");
  if (it == doc.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    out.chat_template = it->get<std::string>();
    return absl::OkStatus();
  }
  // Several named templates: [{"name": "default", "template": ...}, {"name": "tool_use", ...}].
  if (it->is_array()) {
    for (const Json& e : *it) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
        return Error("tokenizer_config.json", "chat_template", "expected {name, template} entries");
      }
      const bool is_default = e.contains("name") && e["name"] == "default";
      if (out.chat_template.empty() || is_default)
        out.chat_template = e["template"].get<std::string>();
    }
    return absl::OkStatus();
  }
  return Error("tokenizer_config.json", "chat_template", "expected a string or a list");
}

absl::Status ParseGenerationConfig(const Json& doc, TokenizerDirConfig& out) {
  auto id_of = [](const Json& v) -> std::optional<int32_t> {
    if (!v.is_number_integer()) return std::nullopt;
    const auto id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(id);
  };
  if (auto it = doc.find("bos_token_id"); it != doc.end() && !it->is_null()) {
    out.bos_token_id = id_of(*it);
    if (!out.bos_token_id)
      return Error("generation_config.json", "bos_token_id", "expected a token id");
  }
  if (auto it = doc.find("eos_token_id"); it != doc.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const Json& v : *it) {
        auto id = id_of(v);
        if (!id) return Error("generation_config.json", "eos_token_id", "expected token ids");
        out.eos_token_ids.push_back(*id);
      }
    } else {
      auto id = id_of(*it);
      if (!id)
        return Error("generation_config.json", "eos_token_id", "expected a token id or a list");
      out.eos_token_ids.push_back(*id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenizerDirConfig> Parse(std::string_view tokenizer_config_json,
                                         std::string_view generation_config_json) {
  TokenizerDirConfig out;
  if (!tokenizer_config_json.empty()) {
    KVS_ASSIGN_OR_RETURN(Json doc, ParseObject(tokenizer_config_json, "tokenizer_config.json"));
    KVS_RETURN_IF_ERROR(ParseTokenizerConfig(doc, out));
  }
  if (!generation_config_json.empty()) {
    KVS_ASSIGN_OR_RETURN(Json doc, ParseObject(generation_config_json, "generation_config.json"));
    KVS_RETURN_IF_ERROR(ParseGenerationConfig(doc, out));
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenizerDirConfig> ParseTokenizerDirConfig(
    std::string_view tokenizer_config_json, std::string_view generation_config_json) {
  try {  // backstop only: every access above is type-checked
    return Parse(tokenizer_config_json, generation_config_json);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer config: ", e.what()));
  }
}

}  // namespace kvserve::tokenizer
