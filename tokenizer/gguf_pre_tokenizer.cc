#include "tokenizer/gguf_pre_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"

namespace kvserve::tokenizer {

const std::vector<GgufPreTokenizerSpec>& GgufPreTokenizers() {
  // Built once on first use; immutable afterwards (a function-local constant, not mutable state).
  static const std::vector<GgufPreTokenizerSpec> kSpecs = {
      {.name = "default",
       .aliases = {},
       .splits = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2SplitPattern, R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
      {.name = "gpt-2", .aliases = {}, .splits = {kGpt2SplitPattern}},
      {.name = "llama-bpe",
       .aliases = {"llama3", "llama-v3"},
       .splits = {kLlama3SplitPattern},
       .ignore_merges = true,
       .add_bos_default = true},
      {.name = "qwen2",
       .aliases = {"qwen2.5", "qwen-2.5"},
       .splits = {kQwen2SplitPattern},
       .nfc = true},
      {.name = "gpt-4o", .aliases = {}, .splits = {kO200kSplitPattern}},
      {.name = "tekken",
       .aliases = {},
       .splits = {kTekkenSplitPattern},
       .ignore_merges = true,
       .add_bos_default = true},
  };
  return kSpecs;
}

namespace {

std::string KnownNames() {
  std::vector<std::string> names;
  for (const GgufPreTokenizerSpec& s : GgufPreTokenizers()) names.emplace_back(s.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<const GgufPreTokenizerSpec*> FindGgufPreTokenizer(std::string_view name) {
  const std::string_view key = name.empty() ? std::string_view("default") : name;
  for (const GgufPreTokenizerSpec& s : GgufPreTokenizers()) {
    if (s.name == key || std::find(s.aliases.begin(), s.aliases.end(), key) != s.aliases.end()) {
      return &s;
    }
  }
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.ggml.pre \"", base::AsAbsl(name),
                   "\" is not a supported pre-tokenizer (supported: ", KnownNames(), ")"));
}

absl::StatusOr<const GgufPreTokenizerSpec*> MatchGgufPreTokenizer(
    const std::vector<std::string>& splits, bool nfc) {
  for (const GgufPreTokenizerSpec& s : GgufPreTokenizers()) {
    if (s.nfc == nfc &&
        std::equal(s.splits.begin(), s.splits.end(), splits.begin(), splits.end())) {
      return &s;
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "the pre-tokenizer (", nfc ? "NFC, " : "", "split regexes [", absl::StrJoin(splits, " ; "),
      "]) matches none of the GGUF pre-tokenizer names (", KnownNames(), ")"));
}

absl::Status BuildGgufPreTokenizer(const GgufPreTokenizerSpec& spec, Normalizer& normalizer,
                                   PreTokenizer& pre_tokenizer) {
  if (spec.nfc) {
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<NormalizerStep> nfc,
                         Normalizer::Unicode(UnicodeForm::kNfc));
    normalizer.add(std::move(nfc));
  }
  for (std::string_view pattern : spec.splits) {
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, Regex::Compile(pattern));
    pre_tokenizer.add(PreTokenizer::Split(std::move(re), SplitBehavior::kIsolated, false));
  }
  pre_tokenizer.add(PreTokenizer::ByteLevel(/*add_prefix_space=*/false, nullptr));
  return absl::OkStatus();
}

}  // namespace kvserve::tokenizer
