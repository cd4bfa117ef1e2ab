#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "gguf/gguf_source.h"
#include "tokenizer/gguf_vocab_io.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {

// Buffers for one encode call, reused across its pieces and words.
struct EncodeScratch {
  std::vector<TextSegment> raw_segments;
  std::vector<TextSegment> norm_segments;
  std::string normalized;
  PieceList pieces;
  PieceList pieces_tmp;
  BpeScratch bpe;
};

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return ss.str();
}

std::optional<std::string> ReadOptionalFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                               const TokenizerDirConfig& config) {
  KVS_ASSIGN_OR_RETURN(TokenizerParts parts, ParseTokenizerJson(json_text));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  KVS_RETURN_IF_ERROR(t->Init(std::move(parts), config));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParts(TokenizerParts parts,
                                                                const TokenizerDirConfig& config) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  KVS_RETURN_IF_ERROR(t->Init(std::move(parts), config));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path,
                                                               const TokenizerDirConfig& config) {
  KVS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto t = FromJson(text, config);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::Status Tokenizer::Init(TokenizerParts parts, const TokenizerDirConfig& config) {
  model_ = std::move(parts.model);
  normalizer_ = std::move(parts.normalizer);
  pre_tokenizer_ = std::move(parts.pre_tokenizer);

  int32_t limit = model_.id_limit();
  for (const AddedToken& t : parts.added_tokens) limit = std::max(limit, t.id + 1);
  if (!IdSpaceIsDense(limit, static_cast<int64_t>(model_.id_limit()) + static_cast<int64_t>(parts.added_tokens.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("added token id ", limit - 1, " is far beyond the vocabulary's ",
                                                   model_.id_limit(), " ids and ", parts.added_tokens.size(),
                                                   " added tokens (ids must stay below 2 x tokens + ", kIdSpaceSlack,
                                                   ")"));
  }
  special_.assign(static_cast<size_t>(limit), false);
  added_content_.assign(static_cast<size_t>(limit), std::string());
  std::vector<AddedToken> raw;
  std::vector<AddedToken> normalized;
  for (const AddedToken& t : parts.added_tokens) {
    special_[t.id] = t.special;
    added_content_[t.id] = t.content;
    added_ids_[t.content] = t.id;
    (t.normalized && !normalizer_.empty() ? normalized : raw).push_back(t);
  }
  raw_added_ = AddedTokenMatcher(raw);
  normalized_added_ = AddedTokenMatcher(normalized);

  std::vector<std::string_view> texts(static_cast<size_t>(limit));
  for (int32_t id = 0; id < limit; ++id) texts[id] = id_to_token(id);
  KVS_ASSIGN_OR_RETURN(decoder_, TokenDecoder::Create(texts, parts.decode_steps));

  // BOS/EOS: tokenizer_config.json's token strings win, generation_config.json's ids next, and
  // the post-processor's prefix last (for BOS only).
  auto resolve = [this](const std::optional<std::string>& text,
                        const char* key) -> absl::StatusOr<std::optional<int32_t>> {
    if (!text || text->empty()) return std::optional<int32_t>();
    auto id = token_to_id(*text);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", key, " \"", *text,
                                                     "\" is not in the vocabulary"));
    }
    return id;
  };
  KVS_ASSIGN_OR_RETURN(std::optional<int32_t> bos, resolve(config.bos_token, "bos_token"));
  KVS_ASSIGN_OR_RETURN(std::optional<int32_t> eos, resolve(config.eos_token, "eos_token"));
  bos_id_ = bos ? bos : config.bos_token_id;
  if (!bos_id_ && !parts.prefix_ids.empty()) bos_id_ = parts.prefix_ids.front();
  if (eos) eos_ids_.push_back(*eos);
  for (int32_t id : config.eos_token_ids) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  }
  for (int32_t id : eos_ids_) {
    if (id >= limit) {
      return absl::InvalidArgumentError(absl::StrCat("eos id ", id, " is outside the vocabulary"));
    }
  }
  if (bos_id_ && *bos_id_ >= limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("bos id ", *bos_id_, " is outside the vocabulary"));
  }
  if (bos_id_) bos_token_ = std::string(id_to_token(*bos_id_));
  if (eos_id()) eos_token_ = std::string(id_to_token(*eos_id()));

  if (config.add_bos_token || config.add_eos_token) {
    if (config.add_bos_token.value_or(false)) {
      if (!bos_id_) {
        return absl::InvalidArgumentError(
            "tokenizer_config.json: add_bos_token is true but there is no bos_token");
      }
      prefix_ids_ = {*bos_id_};
    }
    if (config.add_eos_token.value_or(false)) {
      if (!eos_id()) {
        return absl::InvalidArgumentError(
            "tokenizer_config.json: add_eos_token is true but there is no eos_token");
      }
      suffix_ids_ = {*eos_id()};
    }
  } else {
    prefix_ids_ = std::move(parts.prefix_ids);
    suffix_ids_ = std::move(parts.suffix_ids);
  }
  for (const auto* ids : {&prefix_ids_, &suffix_ids_}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= limit) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor id ", id, " is outside the vocabulary"));
      }
    }
  }
  chat_template_ = config.chat_template;
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_ids_.find(base::AsAbsl(token));
  if (it != added_ids_.end()) return it->second;
  return model_.token_to_id(token);
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  if (!added_content_[id].empty()) return added_content_[id];
  return model_.id_to_token(id);
}

void Tokenizer::EncodePiece(std::string_view piece, bool at_text_start, EncodeScratch& s,
                            std::vector<int32_t>& out) const {
  s.pieces.clear();
  s.pieces.add(piece);
  s.pieces.first_at_text_start = at_text_start;
  pre_tokenizer_.Apply(s.pieces, s.pieces_tmp);
  for (size_t i = 0; i < s.pieces.size(); ++i) model_.EncodeWord(s.pieces[i], s.bpe, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    AppendUtf8Lossy(text, repaired);
    text = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 4);
  if (add_special) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  EncodeScratch s;
  raw_added_.Split(text, s.raw_segments);
  for (const TextSegment& seg : s.raw_segments) {
    if (seg.token_id >= 0) {
      out.push_back(seg.token_id);
      continue;
    }
    std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    const bool at_start = seg.begin == 0;
    if (normalizer_.empty()) {
      EncodePiece(piece, at_start, s, out);
      continue;
    }
    s.normalized.assign(piece);
    normalizer_.Apply(s.normalized);
    // EncodePiece never touches s.normalized or s.norm_segments, so views into them stay valid.
    normalized_added_.Split(s.normalized, s.norm_segments);
    for (const TextSegment& sub : s.norm_segments) {
      if (sub.token_id >= 0) {
        out.push_back(sub.token_id);
      } else {
        EncodePiece(std::string_view(s.normalized).substr(sub.begin, sub.end - sub.begin),
                    at_start && sub.begin == 0, s, out);
      }
    }
  }
  if (add_special) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes.append(decoder_.bytes(id));
  }
  size_t skip = 0;
  while (skip < static_cast<size_t>(decoder_.strip_count()) && skip < bytes.size() &&
         bytes[skip] == decoder_.strip_char()) {
    ++skip;
  }
  std::string out;
  out.reserve(bytes.size() - skip);
  AppendUtf8Lossy(std::string_view(bytes).substr(skip), out);
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerDir(const std::string& dir) {
  // A GGUF model carries its tokenizer in its metadata (tokenizer.ggml.*).
  if (gguf::IsGgufSource(dir)) return LoadGgufTokenizer(dir);
  const std::string tc = ReadOptionalFile(dir + "/tokenizer_config.json").value_or("");
  const std::string gc = ReadOptionalFile(dir + "/generation_config.json").value_or("");
  KVS_ASSIGN_OR_RETURN(TokenizerDirConfig config, ParseTokenizerDirConfig(tc, gc));
  if (config.chat_template.empty()) {
    config.chat_template = ReadOptionalFile(dir + "/chat_template.jinja").value_or("");
  }
  return Tokenizer::FromFile(dir + "/tokenizer.json", config);
}

}  // namespace kvserve::tokenizer
