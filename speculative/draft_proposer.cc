#include "speculative/draft_proposer.h"

#include "speculative/ngram_proposer.h"

namespace kvserve::speculative {

void DraftProposer::ProposeBatch(std::span<const DraftTask> tasks, std::vector<int32_t>& guesses,
                                 std::vector<int32_t>& offsets) {
  guesses.clear();
  offsets.assign(1, 0);
  std::vector<int32_t> one;
  for (const DraftTask& t : tasks) {
    Propose(t.seq, t.tokens, *t.params, t.kv, t.max_tokens, one);
    guesses.insert(guesses.end(), one.begin(), one.end());
    offsets.push_back(static_cast<int32_t>(guesses.size()));
  }
}

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
