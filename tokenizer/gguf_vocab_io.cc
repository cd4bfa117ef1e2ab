#include "tokenizer/gguf_vocab_io.h"

#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"

namespace kvserve::tokenizer {
namespace {

constexpr std::string_view kNormalizedIds = "kvserve.tokenizer.normalized_token_ids";

absl::StatusOr<std::optional<int64_t>> OptionalInt(const gguf::GgufModel& m, std::string_view key) {
  if (m.Find(key) == nullptr) return std::nullopt;
  KVS_ASSIGN_OR_RETURN(int64_t v, m.GetInt(key));
  return v;
}
absl::StatusOr<std::optional<bool>> OptionalBool(const gguf::GgufModel& m, std::string_view key) {
  if (m.Find(key) == nullptr) return std::nullopt;
  KVS_ASSIGN_OR_RETURN(bool v, m.GetBool(key));
  return v;
}

}  // namespace

absl::StatusOr<GgufVocab> ReadGgufVocab(const gguf::GgufModel& m) {
  GgufVocab v;
  if (m.Find("tokenizer.ggml.model") == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(m.description(), ": no tokenizer (tokenizer.ggml.model is missing)"));
  }
  KVS_ASSIGN_OR_RETURN(v.model, m.GetString("tokenizer.ggml.model"));
  if (m.Find("tokenizer.ggml.pre") != nullptr) {
    KVS_ASSIGN_OR_RETURN(v.pre, m.GetString("tokenizer.ggml.pre"));
  }
  KVS_ASSIGN_OR_RETURN(v.tokens, m.GetStrings("tokenizer.ggml.tokens"));
  if (m.Find("tokenizer.ggml.scores") != nullptr) {
    KVS_ASSIGN_OR_RETURN(std::vector<double> scores, m.GetFloats("tokenizer.ggml.scores"));
    v.scores.assign(scores.begin(), scores.end());
  }
  if (m.Find("tokenizer.ggml.token_type") != nullptr) {
    KVS_ASSIGN_OR_RETURN(std::vector<int64_t> types, m.GetInts("tokenizer.ggml.token_type"));
    v.token_types.assign(types.begin(), types.end());
  }
  if (m.Find("tokenizer.ggml.merges") != nullptr) {
    KVS_ASSIGN_OR_RETURN(v.merges, m.GetStrings("tokenizer.ggml.merges"));
  }
  KVS_ASSIGN_OR_RETURN(v.bos_id, OptionalInt(m, "tokenizer.ggml.bos_token_id"));
  KVS_ASSIGN_OR_RETURN(v.eos_id, OptionalInt(m, "tokenizer.ggml.eos_token_id"));
  KVS_ASSIGN_OR_RETURN(v.eot_id, OptionalInt(m, "tokenizer.ggml.eot_token_id"));
  KVS_ASSIGN_OR_RETURN(v.unknown_id, OptionalInt(m, "tokenizer.ggml.unknown_token_id"));
  KVS_ASSIGN_OR_RETURN(v.padding_id, OptionalInt(m, "tokenizer.ggml.padding_token_id"));
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> eom, OptionalInt(m, "tokenizer.ggml.eom_token_id"));
  if (eom) v.eog_ids.push_back(*eom);
  KVS_ASSIGN_OR_RETURN(v.add_bos_token, OptionalBool(m, "tokenizer.ggml.add_bos_token"));
  KVS_ASSIGN_OR_RETURN(v.add_eos_token, OptionalBool(m, "tokenizer.ggml.add_eos_token"));
  KVS_ASSIGN_OR_RETURN(v.add_space_prefix, OptionalBool(m, "tokenizer.ggml.add_space_prefix"));
  if (m.Find("tokenizer.chat_template") != nullptr) {
    KVS_ASSIGN_OR_RETURN(std::string t, m.GetString("tokenizer.chat_template"));
    v.chat_template = std::move(t);
  }
  if (m.Find(kNormalizedIds) != nullptr) {
    KVS_ASSIGN_OR_RETURN(v.normalized_token_ids, m.GetInts(kNormalizedIds));
  }
  return v;
}

void WriteGgufVocab(const GgufVocab& v, gguf::GgufWriter& w) {
  w.SetString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.SetString("tokenizer.ggml.pre", v.pre);
  w.SetStrings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.SetF32s("tokenizer.ggml.scores", v.scores);
  if (!v.token_types.empty()) w.SetI32s("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.SetStrings("tokenizer.ggml.merges", v.merges);
  auto id = [&](const char* key, const std::optional<int64_t>& x) {
    if (x) w.SetU32(key, static_cast<uint32_t>(*x));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.eot_token_id", v.eot_id);
  id("tokenizer.ggml.unknown_token_id", v.unknown_id);
  id("tokenizer.ggml.padding_token_id", v.padding_id);
  if (!v.eog_ids.empty())
    w.SetU32("tokenizer.ggml.eom_token_id", static_cast<uint32_t>(v.eog_ids.front()));
  if (v.add_bos_token) w.SetBool("tokenizer.ggml.add_bos_token", *v.add_bos_token);
  if (v.add_eos_token) w.SetBool("tokenizer.ggml.add_eos_token", *v.add_eos_token);
  if (v.add_space_prefix) w.SetBool("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (v.chat_template) w.SetString("tokenizer.chat_template", *v.chat_template);
  if (!v.normalized_token_ids.empty()) {
    w.SetI32s(std::string(kNormalizedIds),
              std::vector<int32_t>(v.normalized_token_ids.begin(), v.normalized_token_ids.end()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(gguf::GgufModel m, gguf::GgufModel::Open(path));
  KVS_ASSIGN_OR_RETURN(GgufVocab v, ReadGgufVocab(m));
  auto tok = TokenizerFromGgufVocab(v);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(m.description(), ": ", tok.status().message()));
  }
  return tok;
}

}  // namespace kvserve::tokenizer
