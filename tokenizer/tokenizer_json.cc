#include "tokenizer/tokenizer_json.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"
#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using Json = nlohmann::json;

absl::Status Error(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}
absl::Status Unsupported(const std::string& where, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

// Checked field access: a missing key yields the default, a key of the wrong type an error.
absl::StatusOr<bool> GetBool(const Json& obj, const char* key, const std::string& where,
                             bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Error(absl::StrCat(where, ".", key), "expected true or false");
  return it->get<bool>();
}

absl::StatusOr<std::optional<std::string>> GetOptString(const Json& obj, const char* key,
                                                        const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return Error(absl::StrCat(where, ".", key), "expected a string");
  return std::optional<std::string>(it->get<std::string>());
}

absl::StatusOr<std::string> GetString(const Json& obj, const char* key, const std::string& where) {
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> s, GetOptString(obj, key, where));
  if (!s) return Error(absl::StrCat(where, ".", key), "missing (expected a string)");
  return *std::move(s);
}

absl::StatusOr<int64_t> GetInt(const Json& obj, const char* key, const std::string& where,
                               std::optional<int64_t> fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (fallback) return *fallback;
    return Error(absl::StrCat(where, ".", key), "missing (expected an integer)");
  }
  if (!it->is_number_integer()) return Error(absl::StrCat(where, ".", key), "expected an integer");
  return it->get<int64_t>();
}

absl::StatusOr<std::string> GetType(const Json& obj, const std::string& where) {
  if (!obj.is_object()) return Error(where, "expected an object");
  return GetString(obj, "type", where);
}

// {"String": "..."} or {"Regex": "..."} (the pattern of Split and Replace).
absl::StatusOr<std::unique_ptr<Regex>> GetPattern(const Json& obj, const std::string& where,
                                                  bool* is_literal, std::string* literal) {
  auto it = obj.find("pattern");
  const std::string path = absl::StrCat(where, ".pattern");
  if (it == obj.end() || !it->is_object())
    return Error(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> s, GetOptString(*it, "String", path));
  if (s) {
    if (is_literal) *is_literal = true;
    if (literal) *literal = *s;
    auto re = Regex::Literal(*s);
    if (!re.ok()) return Error(path, std::string(re.status().message()));
    return re;
  }
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> r, GetOptString(*it, "Regex", path));
  if (!r) return Error(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  if (is_literal) *is_literal = false;
  auto re = Regex::Compile(*r);
  if (!re.ok()) return Error(path, std::string(re.status().message()));
  return re;
}

absl::StatusOr<PrependScheme> GetPrependScheme(const Json& obj, const std::string& where) {
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> scheme,
                       GetOptString(obj, "prepend_scheme", where));
  if (scheme) {
    if (*scheme == "always") return PrependScheme::kAlways;
    if (*scheme == "first") return PrependScheme::kFirst;
    if (*scheme == "never") return PrependScheme::kNever;
    return Error(absl::StrCat(where, ".prepend_scheme"),
                 absl::StrCat("unknown value \"", *scheme, "\" (expected always|first|never)"));
  }
  // Files older than prepend_scheme carry add_prefix_space instead.
  KVS_ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(obj, "add_prefix_space", where, true));
  return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::string> GetReplacement(const Json& obj, const std::string& where) {
  KVS_ASSIGN_OR_RETURN(std::string rep, GetString(obj, "replacement", where));
  if (rep.empty() || !IsValidUtf8(rep)) {
    return Error(absl::StrCat(where, ".replacement"), "expected one character");
  }
  return rep;
}

// ------------------------------------------------------------------------------------- model

absl::StatusOr<BpeModel> ParseModel(const Json& root, const std::vector<AddedToken>& added) {
  auto it = root.find("model");
  if (it == root.end() || !it->is_object()) return Error("model", "missing or not an object");
  const Json& m = *it;
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> type, GetOptString(m, "type", "model"));
  if (type && *type != "BPE") {
    return Unsupported("model.type", absl::StrCat("\"", *type, "\" is not supported (only BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    KVS_ASSIGN_OR_RETURN(std::optional<std::string> affix, GetOptString(m, key, "model"));
    if (affix && !affix->empty()) {
      return Unsupported(absl::StrCat("model.", key), "subword affixes are not supported");
    }
  }
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) return Error("model.vocab", "missing or not an object");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vit->size());
  for (auto e = vit->begin(); e != vit->end(); ++e) {
    if (!e.value().is_number_integer()) {
      return Error("model.vocab", absl::StrCat("id of \"", e.key(), "\" is not an integer"));
    }
    const auto id = e.value().get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return Error("model.vocab", absl::StrCat("id of \"", e.key(), "\" is out of range"));
    }
    vocab.emplace_back(e.key(), static_cast<int32_t>(id));
  }
  auto mit = m.find("merges");
  if (mit == m.end() || !mit->is_array()) return Error("model.merges", "missing or not an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(mit->size());
  for (size_t i = 0; i < mit->size(); ++i) {
    const Json& e = (*mit)[i];
    const std::string where = absl::StrCat("model.merges[", i, "]");
    if (e.is_string()) {
      // Legacy form "left right": exactly one separating space.
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
          s.find(' ', sp + 1) != std::string::npos) {
        return Error(where, absl::StrCat("\"", s, "\" is not of the form \"left right\""));
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return Error(where, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  BpeOptions options;
  KVS_ASSIGN_OR_RETURN(options.byte_fallback, GetBool(m, "byte_fallback", "model", false));
  KVS_ASSIGN_OR_RETURN(options.fuse_unk, GetBool(m, "fuse_unk", "model", false));
  KVS_ASSIGN_OR_RETURN(options.ignore_merges, GetBool(m, "ignore_merges", "model", false));
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> unk, GetOptString(m, "unk_token", "model"));
  if (unk) {
    for (const auto& [token, id] : vocab) {
      if (token == *unk) options.unk_id = id;
    }
    for (const AddedToken& t : added) {
      if (!options.unk_id && t.content == *unk) options.unk_id = t.id;
    }
    if (!options.unk_id) {
      return Error("model.unk_token", absl::StrCat("\"", *unk, "\" is not in the vocabulary"));
    }
  }
  // model.dropout is a training-time regulariser; inference always encodes deterministically.
  auto model = BpeModel::Create(std::move(vocab), merges, options);
  if (!model.ok()) return Error("model", std::string(model.status().message()));
  return model;
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Json& root) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) return Error("added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& e = (*it)[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!e.is_object()) return Error(where, "expected an object");
    AddedToken t;
    KVS_ASSIGN_OR_RETURN(int64_t id, GetInt(e, "id", where, std::nullopt));
    if (id < 0 || id > kMaxTokenId) return Error(absl::StrCat(where, ".id"), "out of range");
    t.id = static_cast<int32_t>(id);
    KVS_ASSIGN_OR_RETURN(t.content, GetString(e, "content", where));
    if (t.content.empty() || !IsValidUtf8(t.content)) {
      return Error(absl::StrCat(where, ".content"), "must be non-empty valid UTF-8");
    }
    KVS_ASSIGN_OR_RETURN(t.special, GetBool(e, "special", where, false));
    KVS_ASSIGN_OR_RETURN(t.normalized, GetBool(e, "normalized", where, !t.special));
    KVS_ASSIGN_OR_RETURN(t.lstrip, GetBool(e, "lstrip", where, false));
    KVS_ASSIGN_OR_RETURN(t.rstrip, GetBool(e, "rstrip", where, false));
    KVS_ASSIGN_OR_RETURN(t.single_word, GetBool(e, "single_word", where, false));
    out.push_back(std::move(t));
  }
  return out;
}

// ------------------------------------------------------------------------------- normalizer

absl::Status ParseNormalizer(const Json& n, const std::string& where, Normalizer& out) {
  if (n.is_null()) return absl::OkStatus();
  KVS_ASSIGN_OR_RETURN(std::string type, GetType(n, where));
  if (type == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array())
      return Error(absl::StrCat(where, ".normalizers"), "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      KVS_RETURN_IF_ERROR(
          ParseNormalizer((*it)[i], absl::StrCat(where, ".normalizers[", i, "]"), out));
    }
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    KVS_ASSIGN_OR_RETURN(std::string prefix, GetString(n, "prepend", where));
    out.add(Normalizer::Prepend(std::move(prefix)));
    return absl::OkStatus();
  }
  if (type == "Replace") {
    KVS_ASSIGN_OR_RETURN(std::string content, GetString(n, "content", where));
    bool literal = false;
    std::string literal_text;
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, GetPattern(n, where, &literal, &literal_text));
    if (literal) {
      out.add(Normalizer::ReplaceLiteral(std::move(literal_text), std::move(content)));
    } else {
      out.add(Normalizer::ReplaceRegex(std::move(re), std::move(content)));
    }
    return absl::OkStatus();
  }
  std::optional<UnicodeForm> form;
  if (type == "NFC") form = UnicodeForm::kNfc;
  if (type == "NFD") form = UnicodeForm::kNfd;
  if (type == "NFKC") form = UnicodeForm::kNfkc;
  if (type == "NFKD") form = UnicodeForm::kNfkd;
  if (form) {
    auto step = Normalizer::Unicode(*form);
    if (!step.ok()) return Unsupported(where, std::string(step.status().message()));
    out.add(*std::move(step));
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat(where, ".type"),
                     absl::StrCat("normalizer \"", type,
                                  "\" is not supported (Sequence, Prepend, Replace, NFC, NFD, "
                                  "NFKC, NFKD are)"));
}

// ---------------------------------------------------------------------------- pre-tokenizer

absl::Status ParsePreTokenizer(const Json& p, const std::string& where, PreTokenizer& out) {
  if (p.is_null()) return absl::OkStatus();
  KVS_ASSIGN_OR_RETURN(std::string type, GetType(p, where));
  if (type == "Sequence") {
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array())
      return Error(absl::StrCat(where, ".pretokenizers"), "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      KVS_RETURN_IF_ERROR(
          ParsePreTokenizer((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]"), out));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, GetPattern(p, where, nullptr, nullptr));
    KVS_ASSIGN_OR_RETURN(std::string behavior, GetString(p, "behavior", where));
    KVS_ASSIGN_OR_RETURN(bool invert, GetBool(p, "invert", where, false));
    SplitBehavior b;
    if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      b = SplitBehavior::kContiguous;
    } else {
      return Error(absl::StrCat(where, ".behavior"),
                   absl::StrCat("unknown behavior \"", behavior, "\""));
    }
    out.add(PreTokenizer::Split(std::move(re), b, invert));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    KVS_ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(p, "add_prefix_space", where, true));
    KVS_ASSIGN_OR_RETURN(bool use_regex, GetBool(p, "use_regex", where, true));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      auto compiled = Regex::Compile(kGpt2SplitPattern);
      if (!compiled.ok()) return compiled.status();
      re = *std::move(compiled);
    }
    out.add(PreTokenizer::ByteLevel(add_prefix_space, std::move(re)));
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    KVS_ASSIGN_OR_RETURN(std::string rep, GetReplacement(p, where));
    KVS_ASSIGN_OR_RETURN(PrependScheme scheme, GetPrependScheme(p, where));
    KVS_ASSIGN_OR_RETURN(bool split, GetBool(p, "split", where, true));
    out.add(PreTokenizer::Metaspace(std::move(rep), scheme, split));
    return absl::OkStatus();
  }
  if (type == "Digits") {
    KVS_ASSIGN_OR_RETURN(bool individual, GetBool(p, "individual_digits", where, false));
    auto re = Regex::Compile(R"(\p{N})");
    if (!re.ok()) return re.status();
    out.add(PreTokenizer::Digits(*std::move(re), individual));
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat(where, ".type"),
                     absl::StrCat("pre-tokenizer \"", type,
                                  "\" is not supported (Sequence, Split, ByteLevel, Metaspace, "
                                  "Digits are)"));
}

// ---------------------------------------------------------------------------------- decoder

absl::Status ParseDecoder(const Json& d, const std::string& where, std::vector<DecodeStep>& out) {
  KVS_ASSIGN_OR_RETURN(std::string type, GetType(d, where));
  if (type == "Sequence") {
    auto it = d.find("decoders");
    if (it == d.end() || !it->is_array())
      return Error(absl::StrCat(where, ".decoders"), "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      KVS_RETURN_IF_ERROR(ParseDecoder((*it)[i], absl::StrCat(where, ".decoders[", i, "]"), out));
    }
    return absl::OkStatus();
  }
  DecodeStep step;
  if (type == "ByteLevel") {
    step.kind = DecodeStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecodeStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecodeStep::Kind::kFuse;
  } else if (type == "Replace") {
    step.kind = DecodeStep::Kind::kReplace;
    bool literal = false;
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<Regex> unused,
                         GetPattern(d, where, &literal, &step.pattern));
    if (!literal) {
      return Unsupported(absl::StrCat(where, ".pattern"),
                         "regex Replace in a decoder is not supported");
    }
    KVS_ASSIGN_OR_RETURN(step.content, GetString(d, "content", where));
  } else if (type == "Strip") {
    step.kind = DecodeStep::Kind::kStrip;
    KVS_ASSIGN_OR_RETURN(step.content, GetString(d, "content", where));
    KVS_ASSIGN_OR_RETURN(int64_t start, GetInt(d, "start", where, 0));
    KVS_ASSIGN_OR_RETURN(int64_t stop, GetInt(d, "stop", where, 0));
    if (start < 0 || start > 64 || stop < 0) return Error(where, "start/stop out of range");
    step.start = static_cast<int>(start);
    step.stop = static_cast<int>(stop);
  } else if (type == "Metaspace") {
    step.kind = DecodeStep::Kind::kMetaspace;
    KVS_ASSIGN_OR_RETURN(step.pattern, GetReplacement(d, where));
    KVS_ASSIGN_OR_RETURN(step.prepend_scheme, GetPrependScheme(d, where));
  } else {
    return Unsupported(absl::StrCat(where, ".type"),
                       absl::StrCat("decoder \"", type,
                                    "\" is not supported (Sequence, ByteLevel, ByteFallback, Fuse, "
                                    "Replace, Strip, Metaspace are)"));
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

// --------------------------------------------------------------------------- post-processor

// Resolves a special token name of the post-processor to its id.
absl::StatusOr<int32_t> ResolveSpecial(const std::string& name, const Json* special_map,
                                       const std::vector<AddedToken>& added, const BpeModel& model,
                                       const std::string& where) {
  if (special_map != nullptr) {
    auto it = special_map->find(name);
    if (it != special_map->end() && it->is_object()) {
      auto ids = it->find("ids");
      if (ids != it->end() && ids->is_array() && ids->size() == 1 &&
          (*ids)[0].is_number_integer()) {
        const auto id = (*ids)[0].get<int64_t>();
        if (id < 0 || id > kMaxTokenId)
          return Error(where, absl::StrCat("id ", id, " out of range"));
        return static_cast<int32_t>(id);
      }
    }
  }
  for (const AddedToken& t : added) {
    if (t.content == name) return t.id;
  }
  if (auto id = model.token_to_id(name)) return *id;
  return Error(where, absl::StrCat("special token \"", name, "\" is not in the vocabulary"));
}

absl::Status ParsePostProcessor(const Json& p, const std::string& where, TokenizerParts& parts) {
  if (p.is_null()) return absl::OkStatus();
  KVS_ASSIGN_OR_RETURN(std::string type, GetType(p, where));
  if (type == "Sequence") {
    auto it = p.find("processors");
    if (it == p.end() || !it->is_array())
      return Error(absl::StrCat(where, ".processors"), "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      KVS_RETURN_IF_ERROR(
          ParsePostProcessor((*it)[i], absl::StrCat(where, ".processors[", i, "]"), parts));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "TemplateProcessing") {
    auto single = p.find("single");
    if (single == p.end() || !single->is_array())
      return Error(absl::StrCat(where, ".single"), "expected an array");
    auto sm = p.find("special_tokens");
    const Json* special_map = (sm != p.end() && sm->is_object()) ? &*sm : nullptr;
    bool after_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& item = (*single)[i];
      const std::string iw = absl::StrCat(where, ".single[", i, "]");
      if (!item.is_object()) return Error(iw, "expected an object");
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      auto st = item.find("SpecialToken");
      if (st == item.end() || !st->is_object())
        return Error(iw, "expected Sequence or SpecialToken");
      KVS_ASSIGN_OR_RETURN(std::string name, GetString(*st, "id", iw));
      KVS_ASSIGN_OR_RETURN(int32_t id,
                           ResolveSpecial(name, special_map, parts.added_tokens, parts.model, iw));
      (after_sequence ? parts.suffix_ids : parts.prefix_ids).push_back(id);
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      auto it = p.find(key);
      const std::string kw = absl::StrCat(where, ".", key);
      if (it == p.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return Error(kw, "expected [token, id]");
      }
      const auto id = (*it)[1].get<int64_t>();
      if (id < 0 || id > kMaxTokenId) return Error(kw, absl::StrCat("id ", id, " out of range"));
      (std::string(key) == "cls" ? parts.prefix_ids : parts.suffix_ids)
          .push_back(static_cast<int32_t>(id));
    }
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat(where, ".type"),
                     absl::StrCat("post-processor \"", type, "\" is not supported"));
}

absl::StatusOr<TokenizerParts> Parse(std::string_view json_text) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error("(document)", "not valid JSON");
  if (!root.is_object()) return Error("(document)", "expected a JSON object");
  TokenizerParts parts;
  KVS_ASSIGN_OR_RETURN(parts.added_tokens, ParseAddedTokens(root));
  KVS_ASSIGN_OR_RETURN(parts.model, ParseModel(root, parts.added_tokens));
  if (auto it = root.find("normalizer"); it != root.end()) {
    KVS_RETURN_IF_ERROR(ParseNormalizer(*it, "normalizer", parts.normalizer));
  }
  if (auto it = root.find("pre_tokenizer"); it != root.end()) {
    KVS_RETURN_IF_ERROR(ParsePreTokenizer(*it, "pre_tokenizer", parts.pre_tokenizer));
  }
  auto dec = root.find("decoder");
  if (dec == root.end() || dec->is_null()) {
    return Unsupported("decoder", "a tokenizer without a decoder is not supported");
  }
  KVS_RETURN_IF_ERROR(ParseDecoder(*dec, "decoder", parts.decode_steps));
  if (auto it = root.find("post_processor"); it != root.end()) {
    KVS_RETURN_IF_ERROR(ParsePostProcessor(*it, "post_processor", parts));
  }
  return parts;
}

}  // namespace

absl::StatusOr<TokenizerParts> ParseTokenizerJson(std::string_view json_text) {
  // Every access above is type-checked first; the catch is only a backstop so that a
  // nlohmann exception can never escape this boundary.
  try {
    return Parse(json_text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

}  // namespace kvserve::tokenizer
