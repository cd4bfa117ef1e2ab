// GGUF vocabulary -> Tokenizer. See gguf_vocab.h for the two vocabulary styles; the pieces built
// here are the ones a tokenizer.json of the same style would give (tokenizer_json.cc), so the
// same Tokenizer runs both.
#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tokenizer/gguf_pre_tokenizer.h"
#include "tokenizer/spm_merges.h"
#include "tokenizer/tokenizer_json.h"

namespace kvserve::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

absl::Status Bad(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF ", key, ": ", what));
}

// An optional special id, checked against the vocabulary size.
absl::StatusOr<std::optional<int32_t>> CheckId(std::optional<int64_t> id, absl::string_view key,
                                               size_t n) {
  if (!id) return std::optional<int32_t>();
  if (*id < 0 || static_cast<uint64_t>(*id) >= n) {
    return Bad(key, absl::StrCat("id ", *id, " is outside the ", n, " tokens"));
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

DecodeStep Step(DecodeStep::Kind kind, std::string pattern = "", std::string content = "",
                int start = 0) {
  DecodeStep s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  s.start = start;
  return s;
}

// "left right" -> {left, right}: the first space after the first byte separates the two.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMerges(
    const std::vector<std::string>& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sp = m.size() < 2 ? std::string::npos : m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      return Bad("tokenizer.ggml.merges",
                 absl::StrCat("merge #", i, " \"", m, "\" is not of the form \"left right\""));
    }
    out.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufVocab(const GgufVocab& v) {
  const bool spm = v.model == "llama";
  if (!spm && v.model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("GGUF tokenizer.ggml.model \"", v.model,
                                                 "\" is not supported (llama, gpt2 are)"));
  }
  const size_t n = v.tokens.size();
  if (n == 0) return Bad("tokenizer.ggml.tokens", "the vocabulary is empty");
  if (n > static_cast<size_t>(kMaxTokenId) + 1) {
    return Bad("tokenizer.ggml.tokens", absl::StrCat(n, " tokens is more than supported"));
  }
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return Bad("tokenizer.ggml.token_type",
               absl::StrCat(v.token_types.size(), " entries for ", n, " tokens"));
  }
  for (size_t id = 0; id < v.token_types.size(); ++id) {
    if (v.token_types[id] < 1 || v.token_types[id] > 6) {
      return Bad("tokenizer.ggml.token_type",
                 absl::StrCat("token ", id, " has unknown type ", v.token_types[id]));
    }
  }
  if ((spm || !v.scores.empty()) && v.scores.size() != n) {
    return Bad("tokenizer.ggml.scores",
               absl::StrCat(v.scores.size(), " scores for ", n, " tokens"));
  }
  auto type = [&v](size_t id) {
    return v.token_types.empty() ? GgufTokenType::kNormal
                                 : static_cast<GgufTokenType>(v.token_types[id]);
  };
  KVS_ASSIGN_OR_RETURN(auto bos, CheckId(v.bos_id, "tokenizer.ggml.bos_token_id", n));
  KVS_ASSIGN_OR_RETURN(auto eos, CheckId(v.eos_id, "tokenizer.ggml.eos_token_id", n));
  KVS_ASSIGN_OR_RETURN(auto eot, CheckId(v.eot_id, "tokenizer.ggml.eot_token_id", n));
  KVS_ASSIGN_OR_RETURN(auto unk, CheckId(v.unknown_id, "tokenizer.ggml.unknown_token_id", n));
  KVS_RETURN_IF_ERROR(CheckId(v.padding_id, "tokenizer.ggml.padding_token_id", n).status());
  std::vector<int32_t> eog;
  for (int64_t id : v.eog_ids) {
    KVS_ASSIGN_OR_RETURN(auto e, CheckId(id, "end-of-generation ids", n));
    eog.push_back(*e);
  }
  std::vector<bool> normalized(n, false);
  for (int64_t id : v.normalized_token_ids) {
    KVS_ASSIGN_OR_RETURN(auto e, CheckId(id, "normalized_token_ids", n));
    const GgufTokenType t = type(static_cast<size_t>(*e));
    if (t != GgufTokenType::kControl && t != GgufTokenType::kUserDefined &&
        t != GgufTokenType::kUnknown) {
      return Bad("normalized_token_ids", absl::StrCat("token ", *e, " is not an added token"));
    }
    normalized[static_cast<size_t>(*e)] = true;
  }

  TokenizerParts parts;
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(n);
  bool has_bytes = false;
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = v.tokens[id];
    if (text.empty()) continue;  // llama.cpp renames these; nothing can produce them
    vocab.emplace_back(text, static_cast<int32_t>(id));
    const GgufTokenType t = type(id);
    has_bytes |= t == GgufTokenType::kByte;
    if (t == GgufTokenType::kUnknown || t == GgufTokenType::kControl ||
        t == GgufTokenType::kUserDefined) {
      parts.added_tokens.push_back({.content = text,
                                    .id = static_cast<int32_t>(id),
                                    .special = t != GgufTokenType::kUserDefined,
                                    .normalized = normalized[id]});
    }
  }
  BpeOptions options;
  if (unk && !v.tokens[*unk].empty()) options.unk_id = *unk;
  bool add_bos = false;
  if (spm) {
    options.byte_fallback = has_bytes;
    options.fuse_unk = true;  // SentencePiece emits one unknown for a run of unknown characters
    std::vector<bool> mergeable(n);
    for (size_t id = 0; id < n; ++id) mergeable[id] = type(id) == GgufTokenType::kNormal;
    auto merges = SpmMergesFromScores(v.tokens, v.scores, mergeable);
    if (!merges.ok()) return Bad("tokenizer.ggml.scores", std::string(merges.status().message()));
    auto model = BpeModel::CreateRanked(vocab, *merges, options);
    if (!model.ok()) return Bad("tokenizer.ggml.tokens", std::string(model.status().message()));
    parts.model = *std::move(model);
    const bool prefix = v.add_space_prefix.value_or(true);
    if (prefix) parts.normalizer.add(Normalizer::Prepend(std::string(kSpace)));
    parts.normalizer.add(Normalizer::ReplaceLiteral(" ", std::string(kSpace)));
    parts.decode_steps.push_back(Step(DecodeStep::Kind::kReplace, std::string(kSpace), " "));
    parts.decode_steps.push_back(Step(DecodeStep::Kind::kByteFallback));
    parts.decode_steps.push_back(Step(DecodeStep::Kind::kFuse));
    if (prefix) parts.decode_steps.push_back(Step(DecodeStep::Kind::kStrip, "", " ", 1));
    add_bos = v.add_bos_token.value_or(true);
  } else {
    KVS_ASSIGN_OR_RETURN(const GgufPreTokenizerSpec* spec, FindGgufPreTokenizer(v.pre));
    options.ignore_merges = spec->ignore_merges;
    KVS_ASSIGN_OR_RETURN(auto merges, ParseMerges(v.merges));
    auto model = BpeModel::Create(vocab, merges, options);
    if (!model.ok()) return Bad("tokenizer.ggml.merges", std::string(model.status().message()));
    parts.model = *std::move(model);
    KVS_RETURN_IF_ERROR(BuildGgufPreTokenizer(*spec, parts.normalizer, parts.pre_tokenizer));
    parts.decode_steps.push_back(Step(DecodeStep::Kind::kByteLevel));
    add_bos = v.add_bos_token.value_or(spec->add_bos_default);
  }

  // BOS/EOS policy: the flags decide (llama.cpp's defaults when absent). A default that asks for
  // a token the file does not name is dropped; an explicit one is an error.
  bool add_eos = v.add_eos_token.value_or(false);
  if (add_bos && !bos) {
    if (v.add_bos_token) return Bad("tokenizer.ggml.add_bos_token", "true but no bos_token_id");
    add_bos = false;
  }
  if (add_eos && !eos) return Bad("tokenizer.ggml.add_eos_token", "true but no eos_token_id");
  TokenizerDirConfig config;
  config.add_bos_token = add_bos;
  config.add_eos_token = add_eos;
  config.bos_token_id = bos;
  for (std::optional<int32_t> id : {eos, eot}) {
    if (id) config.eos_token_ids.push_back(*id);
  }
  config.eos_token_ids.insert(config.eos_token_ids.end(), eog.begin(), eog.end());
  config.chat_template = v.chat_template.value_or("");
  return Tokenizer::FromParts(std::move(parts), config);
}

absl::Status PadGgufVocab(GgufVocab& v, int64_t vocab_size) {
  const auto n = static_cast<int64_t>(v.tokens.size());
  if (vocab_size < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", n, " tokens, more than the model's vocab_size ", vocab_size));
  }
  if (vocab_size > static_cast<int64_t>(kMaxTokenId) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab_size, " is too large"));
  }
  const bool typed = !v.token_types.empty();
  const bool scored = !v.scores.empty();
  for (int64_t id = n; id < vocab_size; ++id) {
    v.tokens.push_back(absl::StrCat("<unused_", id, ">"));
    if (typed) v.token_types.push_back(static_cast<int32_t>(GgufTokenType::kUnused));
    if (scored) v.scores.push_back(0.0f);
  }
  return absl::OkStatus();
}

}  // namespace kvserve::tokenizer
