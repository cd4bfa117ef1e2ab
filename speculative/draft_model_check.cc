#include "speculative/draft_model_check.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::speculative {
namespace {

absl::Status Refuse(const std::string& draft_dir, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("speculative.draft_model=", draft_dir, ": ", why,
                   " (a draft model must share the target model's tokenizer)"));
}

bool HasTokenizer(const std::string& dir) {
  return std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json");
}

}  // namespace

absl::Status CheckDraftCompatible(const std::string& target_dir, int32_t target_vocab_size,
                                  const std::string& draft_dir, int32_t draft_vocab_size) {
  if (draft_vocab_size != target_vocab_size) {
    return Refuse(draft_dir, absl::StrCat("its vocabulary has ", draft_vocab_size,
                                          " tokens, the target's ", target_vocab_size));
  }
  // A target served by token ids alone (no tokenizer.json): the sizes are all there is to check.
  if (!HasTokenizer(target_dir)) return absl::OkStatus();
  if (!HasTokenizer(draft_dir)) return Refuse(draft_dir, "it has no tokenizer.json");
  auto target = tokenizer::LoadTokenizerDir(target_dir);
  if (!target.ok()) return target.status();  // the target's own loader reports it as well
  auto draft = tokenizer::LoadTokenizerDir(draft_dir);
  if (!draft.ok())
    return Refuse(draft_dir, absl::StrCat("its tokenizer: ", draft.status().message()));
  const tokenizer::Tokenizer& t = **target;
  const tokenizer::Tokenizer& d = **draft;
  if (t.vocab_size() != d.vocab_size()) {
    return Refuse(draft_dir, absl::StrCat("its tokenizer has ", d.vocab_size(),
                                          " pieces, the target's ", t.vocab_size()));
  }
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.token_decoder().bytes(id) != d.token_decoder().bytes(id) ||
        t.is_special(id) != d.is_special(id)) {
      return Refuse(draft_dir, absl::StrCat("token id ", id, " differs from the target's (\"",
                                            std::string(d.token_decoder().bytes(id)), "\" vs \"",
                                            std::string(t.token_decoder().bytes(id)), "\")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::speculative
