#include "speculative/draft_proposer.h"

#include "speculative/ngram_proposer.h"

namespace kvserve::speculative {

ProposerSet::ProposerSet() : ngram_(std::make_unique<NgramProposer>()) {}
ProposerSet::~ProposerSet() = default;

const DraftProposer* ProposerSet::For(config::SpeculativeMethod method) const {
  switch (method) {
    case config::SpeculativeMethod::kNgram:
      return ngram_.get();
    case config::SpeculativeMethod::kNone:
      return nullptr;
  }
  return nullptr;
}

}  // namespace kvserve::speculative
