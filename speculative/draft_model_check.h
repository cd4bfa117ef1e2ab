// CheckDraftCompatible: whether a draft model directory may draft for a target model. Token ids
// pass between them unchanged, so they must mean the same text: same vocabulary size and, when
// the target has a tokenizer, a draft tokenizer with the same pieces under the same ids (the
// bytes each id decodes to, and which ids are special). Size alone is not enough: two BPE
// vocabularies of 32000 pieces usually disagree on most ids. Run once at start-up.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvserve::speculative {

// OK, or InvalidArgument naming speculative.draft_model and the first difference found.
// `target_vocab_size` / `draft_vocab_size`: the models' config.json vocab_size.
absl::Status CheckDraftCompatible(const std::string& target_dir, int32_t target_vocab_size,
                                  const std::string& draft_dir, int32_t draft_vocab_size);

}  // namespace kvserve::speculative
