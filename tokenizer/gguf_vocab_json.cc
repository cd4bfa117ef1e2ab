// tokenizer.json -> GGUF vocabulary (GgufVocabFromTokenizerJson, declared in gguf_vocab.h).
//
// The file is read as JSON here rather than through ParseTokenizerJson because the GGUF side
// needs what the built pieces hide (the split regexes, the exact normalizer and decoder steps,
// the merge list). Only pipelines that TokenizerFromGgufVocab rebuilds exactly are accepted:
//
//   byte-level ("gpt2"):  normalizer null | NFC;  pre_tokenizer [Split(regex, Isolated)...]
//                         then ByteLevel(add_prefix_space=false) (use_regex=true counts as a
//                         Split with the GPT-2 regex);  decoder ByteLevel;  no byte fallback
//   SentencePiece-style ("llama"):  normalizer [Prepend("▁")] + Replace(" " -> "▁");  no
//                         pre_tokenizer;  decoder Replace("▁" -> " "), ByteFallback, Fuse
//                         [, Strip(" ", 1) exactly when Prepend is there]
//
// Everything else (Metaspace, other models, lstrip/rstrip/single_word added tokens, a split
// regex without a GGUF name) is an error that names it.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"
#include "tokenizer/gguf_pre_tokenizer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/pre_tokenizer.h"

namespace kvserve::tokenizer {
namespace {

using Json = nlohmann::json;

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

absl::Status Refuse(const std::string& where, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json -> GGUF: ", where, ": ", what,
                                               " (a GGUF vocabulary cannot "
                                               "express this exactly)"));
}
absl::Status Malformed(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

std::string TypeOf(const Json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}
bool Flag(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}
std::optional<std::string> Str(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}
// A Split/Replace pattern: {"String": s} or {"Regex": r}; `is_regex` says which.
std::optional<std::string> Pattern(const Json& j, bool* is_regex) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) return std::nullopt;
  if (auto s = Str(*it, "String")) {
    *is_regex = false;
    return s;
  }
  *is_regex = true;
  return Str(*it, "Regex");
}
// Steps of a Sequence (key `list_key`), or the single step itself; null gives none.
std::vector<Json> Steps(const Json& j, const char* list_key) {
  if (j.is_null()) return {};
  if (TypeOf(j) == "Sequence") {
    auto it = j.find(list_key);
    std::vector<Json> out;
    if (it != j.end() && it->is_array()) {
      for (const Json& e : *it) {
        for (Json& s : Steps(e, list_key)) out.push_back(std::move(s));
      }
    }
    return out;
  }
  return {j};
}

struct Added {
  std::string content;
  int32_t id;
  bool special;
  bool normalized;
};

struct Source {
  absl::flat_hash_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<Added> added;
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  int32_t n = 0;  // one past the largest id
};

absl::StatusOr<Source> ReadModel(const Json& root) {
  Source s;
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) return Malformed("model", "missing");
  const Json& m = *mit;
  if (auto type = Str(m, "type"); type && *type != "BPE") {
    return Refuse("model.type", absl::StrCat("\"", *type, "\" (only BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto a = Str(m, key); a && !a->empty()) return Refuse(absl::StrCat("model.", key), *a);
  }
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) return Malformed("model.vocab", "missing");
  for (auto e = vit->begin(); e != vit->end(); ++e) {
    if (!e.value().is_number_integer()) return Malformed("model.vocab", e.key());
    const auto id = e.value().get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return Malformed("model.vocab", absl::StrCat("id of \"", e.key(), "\" out of range"));
    }
    s.vocab.emplace(e.key(), static_cast<int32_t>(id));
    s.n = std::max(s.n, static_cast<int32_t>(id) + 1);
  }
  auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array()) return Malformed("model.merges", "missing");
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    std::string l, r;
    if (e.is_string()) {
      const std::string t = e.get<std::string>();
      const size_t sp = t.find(' ');
      if (sp == std::string::npos || t.find(' ', sp + 1) != std::string::npos) {
        return Malformed(absl::StrCat("model.merges[", i, "]"), t);
      }
      l = t.substr(0, sp);
      r = t.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      l = e[0].get<std::string>();
      r = e[1].get<std::string>();
    } else {
      return Malformed(absl::StrCat("model.merges[", i, "]"), "expected \"left right\"");
    }
    if (l.empty() || r.empty() || l.find(' ') != std::string::npos ||
        r.find(' ') != std::string::npos) {
      return Refuse(absl::StrCat("model.merges[", i, "]"),
                    "a side is empty or contains a space (GGUF merges are \"left right\")");
    }
    s.merges.emplace_back(std::move(l), std::move(r));
  }
  s.byte_fallback = Flag(m, "byte_fallback", false);
  s.fuse_unk = Flag(m, "fuse_unk", false);
  s.ignore_merges = Flag(m, "ignore_merges", false);
  s.unk_token = Str(m, "unk_token");
  if (auto at = root.find("added_tokens"); at != root.end() && at->is_array()) {
    for (size_t i = 0; i < at->size(); ++i) {
      const Json& e = (*at)[i];
      const std::string where = absl::StrCat("added_tokens[", i, "]");
      auto id = e.is_object() ? e.find("id") : e.end();
      auto content = e.is_object() ? Str(e, "content") : std::nullopt;
      if (!e.is_object() || id == e.end() || !id->is_number_integer() || !content ||
          content->empty() || id->get<int64_t>() < 0 || id->get<int64_t>() > kMaxTokenId) {
        return Malformed(where, "expected {id, content}");
      }
      for (const char* key : {"lstrip", "rstrip", "single_word"}) {
        if (Flag(e, key, false)) return Refuse(absl::StrCat(where, " \"", *content, "\""), key);
      }
      const bool special = Flag(e, "special", false);
      s.added.push_back({*content, static_cast<int32_t>(id->get<int64_t>()), special,
                         Flag(e, "normalized", !special)});
      s.n = std::max(s.n, s.added.back().id + 1);
    }
  }
  if (!IdSpaceIsDense(s.n, static_cast<int64_t>(s.vocab.size() + s.added.size()))) {
    return Malformed("model.vocab", absl::StrCat("id ", s.n - 1, " is far beyond the vocabulary"));
  }
  return s;
}

// The post-processor's special tokens around one sequence.
absl::Status ReadPostProcessor(const Json& p, const Source& src, std::vector<int32_t>& prefix,
                               std::vector<int32_t>& suffix) {
  for (const Json& step : Steps(p, "processors")) {
    const std::string type = TypeOf(step);
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing") return Refuse("post_processor", type);
    auto single = step.find("single");
    if (single == step.end() || !single->is_array()) {
      return Malformed("post_processor.single", "expected an array");
    }
    bool after = false;
    for (const Json& item : *single) {
      if (item.is_object() && item.contains("Sequence")) {
        after = true;
        continue;
      }
      std::optional<std::string> name;
      if (item.is_object() && item.contains("SpecialToken")) name = Str(item["SpecialToken"], "id");
      if (!name) return Malformed("post_processor.single", "expected Sequence or SpecialToken");
      std::optional<int32_t> id;
      if (auto sm = step.find("special_tokens"); sm != step.end() && sm->is_object()) {
        auto e = sm->find(*name);
        if (e != sm->end() && e->is_object() && e->contains("ids") && (*e)["ids"].is_array() &&
            (*e)["ids"].size() == 1 && (*e)["ids"][0].is_number_integer()) {
          id = static_cast<int32_t>((*e)["ids"][0].get<int64_t>());
        }
      }
      for (const Added& a : src.added) {
        if (!id && a.content == *name) id = a.id;
      }
      if (auto v = src.vocab.find(*name); !id && v != src.vocab.end()) id = v->second;
      if (!id || *id < 0 || *id >= src.n) {
        return Malformed("post_processor", absl::StrCat("\"", *name, "\" is not a token"));
      }
      (after ? suffix : prefix).push_back(*id);
    }
  }
  return absl::OkStatus();
}

// Byte-level: the split regexes and whether NFC comes first.
absl::StatusOr<const GgufPreTokenizerSpec*> ReadByteLevel(const Json& root, const Source& src) {
  if (src.byte_fallback) return Refuse("model.byte_fallback", "byte fallback in a byte-level BPE");
  bool nfc = false;
  for (const Json& n : Steps(root.value("normalizer", Json()), "normalizers")) {
    if (TypeOf(n) != "NFC" || nfc) return Refuse("normalizer", TypeOf(n) + " (only NFC)");
    nfc = true;
  }
  std::vector<std::string> splits;
  bool byte_level = false;
  for (const Json& p : Steps(root.value("pre_tokenizer", Json()), "pretokenizers")) {
    const std::string type = TypeOf(p);
    if (byte_level) return Refuse("pre_tokenizer", type + " after ByteLevel");
    if (type == "Split") {
      bool is_regex = false;
      auto pattern = Pattern(p, &is_regex);
      if (!pattern || !is_regex || Str(p, "behavior").value_or("") != "Isolated" ||
          Flag(p, "invert", false)) {
        return Refuse("pre_tokenizer", "a Split other than Regex/Isolated/not inverted");
      }
      splits.push_back(*pattern);
    } else if (type == "ByteLevel") {
      if (Flag(p, "add_prefix_space", true))
        return Refuse("pre_tokenizer", "ByteLevel prefix space");
      if (Flag(p, "use_regex", true)) splits.emplace_back(kGpt2SplitPattern);
      byte_level = true;
    } else {
      return Refuse("pre_tokenizer", absl::StrCat("\"", type, "\""));
    }
  }
  if (!byte_level) return Refuse("pre_tokenizer", "no ByteLevel step in a byte-level BPE");
  auto spec = MatchGgufPreTokenizer(splits, nfc);
  if (!spec.ok()) return Refuse("pre_tokenizer", std::string(spec.status().message()));
  if ((*spec)->ignore_merges != src.ignore_merges) {
    return Refuse("model.ignore_merges",
                  absl::StrCat(src.ignore_merges ? "true" : "false", ", but GGUF readers take ",
                               std::string((*spec)->name), " with ignore_merges ",
                               (*spec)->ignore_merges ? "true" : "false"));
  }
  return *spec;
}

// SentencePiece-style: whether a "▁" is prepended. Checks the normalizer, pre-tokenizer and
// decoder against the pipeline TokenizerFromGgufVocab builds.
absl::StatusOr<bool> ReadSentencePiece(const Json& root, const Source& src) {
  bool prepend = false;
  bool replace = false;
  for (const Json& n : Steps(root.value("normalizer", Json()), "normalizers")) {
    const std::string type = TypeOf(n);
    bool is_regex = false;
    if (type == "Prepend" && Str(n, "prepend") == kSpace && !prepend) {
      prepend = true;
    } else if (type == "Replace" && Pattern(n, &is_regex) == " " && !is_regex &&
               Str(n, "content") == kSpace && !replace) {
      replace = true;
    } else {
      return Refuse("normalizer", absl::StrCat("\"", type, "\" step"));
    }
  }
  if (!replace) {
    return Refuse("normalizer", "no Replace(\" \" -> \"▁\") step (not SentencePiece-style)");
  }
  if (auto p = root.find("pre_tokenizer"); p != root.end() && !p->is_null()) {
    return Refuse("pre_tokenizer",
                  absl::StrCat("\"", TypeOf(*p), "\" in a SentencePiece-style BPE"));
  }
  const std::vector<Json> dec = Steps(root.value("decoder", Json()), "decoders");
  bool is_regex = false;
  const bool decoder_ok =
      (dec.size() == 3 || dec.size() == 4) && TypeOf(dec[0]) == "Replace" &&
      Pattern(dec[0], &is_regex) == kSpace && !is_regex && Str(dec[0], "content") == " " &&
      TypeOf(dec[1]) == "ByteFallback" && TypeOf(dec[2]) == "Fuse" &&
      (dec.size() == 3) == !prepend &&
      (dec.size() == 3 || (TypeOf(dec[3]) == "Strip" && Str(dec[3], "content") == " " &&
                           dec[3].value("start", -1) == 1 && dec[3].value("stop", -1) == 0));
  if (!decoder_ok) {
    return Refuse("decoder", absl::StrCat("not Replace(\"▁\", \" \"), ByteFallback, Fuse",
                                          prepend ? ", Strip(\" \", 1)" : ""));
  }
  if (src.ignore_merges) return Refuse("model.ignore_merges", "true in a SentencePiece-style BPE");
  int byte_tokens = 0;
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    byte_tokens += src.vocab.contains(
        absl::StrCat("<0x", std::string(1, kHex[b >> 4]), std::string(1, kHex[b & 15]), ">"));
  }
  if (!src.byte_fallback && byte_tokens > 0) {
    return Refuse("model.byte_fallback", "false with <0xXX> tokens in the vocabulary");
  }
  if ((!src.byte_fallback || byte_tokens < 256) && !src.fuse_unk) {
    return Refuse("model.fuse_unk", "false (SentencePiece fuses unknown characters)");
  }
  return prepend;
}

bool IsByteToken(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

absl::StatusOr<GgufVocab> Convert(std::string_view text, const TokenizerDirConfig& config) {
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Malformed("(document)", "not a JSON object");
  KVS_ASSIGN_OR_RETURN(Source src, ReadModel(root));
  GgufVocab v;
  const bool byte_level = TypeOf(root.value("decoder", Json())) == "ByteLevel";
  bool has_normalizer = !root.value("normalizer", Json()).is_null();
  if (byte_level) {
    KVS_ASSIGN_OR_RETURN(const GgufPreTokenizerSpec* spec, ReadByteLevel(root, src));
    v.model = "gpt2";
    v.pre = std::string(spec->name);
  } else {
    KVS_ASSIGN_OR_RETURN(bool prepend, ReadSentencePiece(root, src));
    v.model = "llama";
    v.add_space_prefix = prepend;
  }

  // Tokens by id: the vocabulary, added tokens over it, holes as unused.
  v.tokens.assign(static_cast<size_t>(src.n), std::string());
  v.token_types.assign(static_cast<size_t>(src.n), static_cast<int32_t>(GgufTokenType::kUnused));
  for (const auto& [token, id] : src.vocab) {
    if (!v.tokens[id].empty()) return Malformed("model.vocab", absl::StrCat("id ", id, " twice"));
    v.tokens[id] = token;
    const bool byte = !byte_level && IsByteToken(token);
    v.token_types[id] = static_cast<int32_t>(byte ? GgufTokenType::kByte : GgufTokenType::kNormal);
  }
  std::optional<int32_t> unk;
  if (src.unk_token) {
    for (const Added& a : src.added) {
      if (!unk && a.content == *src.unk_token) unk = a.id;
    }
    if (auto it = src.vocab.find(*src.unk_token); !unk && it != src.vocab.end()) unk = it->second;
    if (!unk) return Malformed("model.unk_token", "not in the vocabulary");
    v.unknown_id = *unk;
  }
  for (const Added& a : src.added) {
    v.tokens[a.id] = a.content;
    GgufTokenType t = a.special ? GgufTokenType::kControl : GgufTokenType::kUserDefined;
    if (a.special && unk == a.id) t = GgufTokenType::kUnknown;
    v.token_types[a.id] = static_cast<int32_t>(t);
    if (a.normalized && has_normalizer) v.normalized_token_ids.push_back(a.id);
  }
  for (int32_t id = 0; id < src.n; ++id) {
    if (v.tokens[id].empty()) v.tokens[id] = absl::StrCat("<unused_", id, ">");
  }

  if (byte_level) {
    v.merges.reserve(src.merges.size());
    for (const auto& [l, r] : src.merges) v.merges.push_back(absl::StrCat(l, " ", r));
  } else {
    // score = -(rank of the first merge producing the token); other normal tokens below all.
    absl::flat_hash_map<std::string, int64_t> first_rank;
    for (size_t r = 0; r < src.merges.size(); ++r) {
      first_rank.try_emplace(src.merges[r].first + src.merges[r].second, static_cast<int64_t>(r));
    }
    const auto n_merges = static_cast<int64_t>(src.merges.size());
    v.scores.assign(static_cast<size_t>(src.n), 0.0f);
    for (int32_t id = 0; id < src.n; ++id) {
      if (v.token_types[id] != static_cast<int32_t>(GgufTokenType::kNormal)) continue;
      auto it = first_rank.find(v.tokens[id]);
      v.scores[id] = -static_cast<float>(it != first_rank.end() ? it->second : n_merges + id);
    }
  }

  // Special ids and the BOS/EOS policy.
  auto lookup = [&](const std::string& t) -> std::optional<int32_t> {
    for (const Added& a : src.added) {
      if (a.content == t) return a.id;
    }
    if (auto it = src.vocab.find(t); it != src.vocab.end()) return it->second;
    return std::nullopt;
  };
  std::optional<int32_t> bos, eos;
  if (config.bos_token && !config.bos_token->empty()) {
    bos = lookup(*config.bos_token);
    if (!bos) return Malformed("bos_token", absl::StrCat("\"", *config.bos_token, "\" unknown"));
  } else if (config.bos_token_id) {
    bos = *config.bos_token_id;
  }
  if (config.eos_token && !config.eos_token->empty()) {
    eos = lookup(*config.eos_token);
    if (!eos) return Malformed("eos_token", absl::StrCat("\"", *config.eos_token, "\" unknown"));
  } else if (!config.eos_token_ids.empty()) {
    eos = config.eos_token_ids.front();
  }
  std::vector<int32_t> prefix, suffix;
  KVS_RETURN_IF_ERROR(ReadPostProcessor(root.value("post_processor", Json()), src, prefix, suffix));
  if (config.add_bos_token || config.add_eos_token) {
    v.add_bos_token = config.add_bos_token.value_or(false);
    v.add_eos_token = config.add_eos_token.value_or(false);
  } else {
    if (prefix.size() > 1 || suffix.size() > 1 || (!prefix.empty() && bos && prefix[0] != *bos) ||
        (!suffix.empty() && eos && suffix[0] != *eos)) {
      return Refuse("post_processor", "special tokens other than one BOS before / EOS after");
    }
    if (!prefix.empty()) bos = prefix[0];
    if (!suffix.empty()) eos = suffix[0];
    v.add_bos_token = !prefix.empty();
    v.add_eos_token = !suffix.empty();
  }
  if (bos) v.bos_id = *bos;
  if (eos) v.eos_id = *eos;
  for (int32_t id : config.eos_token_ids) {
    if (id != eos) v.eog_ids.push_back(id);
  }
  if (!config.chat_template.empty()) v.chat_template = config.chat_template;
  return v;
}

}  // namespace

absl::StatusOr<GgufVocab> GgufVocabFromTokenizerJson(std::string_view tokenizer_json,
                                                     const TokenizerDirConfig& config) {
  try {  // backstop only: every access above is type-checked
    return Convert(tokenizer_json, config);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

}  // namespace kvserve::tokenizer
