#include "speculative/draft_proposer.h"

#include "speculative/ngram_proposer.h"

namespace kvserve::speculative {

ProposerSet::ProposerSet(DraftProposer* draft)
    : ngram_(std::make_unique<NgramProposer>()), draft_(draft) {}
ProposerSet::~ProposerSet() = default;

DraftProposer* ProposerSet::For(config::SpeculativeMethod method) const {
  switch (method) {
    case config::SpeculativeMethod::kNgram:
      return ngram_.get();
    case config::SpeculativeMethod::kDraft:
      return draft_;
    case config::SpeculativeMethod::kNone:
      return nullptr;
  }
  return nullptr;
}

void ProposerSet::Release(int64_t seq) const {
  ngram_->Release(seq);
  if (draft_ != nullptr) draft_->Release(seq);
}

}  // namespace kvserve::speculative
