// DraftProposer: the strategy that guesses a sequence's next tokens (speculative decoding).
// The scheduler asks it once per decode step of a speculating sequence; the model runner then
// verifies the guesses against the target model in one forward pass (docs/speculative.md).
//
// Proposers see only the sequence's tokens (prompt then generated, all verified): a draft is
// a guess, never state, so a wrong one costs compute but no correctness. They must not
// allocate in steady state beyond `out`'s capacity.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "speculative/spec_params.h"

namespace kvserve::speculative {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Appends at most `max_tokens` guesses that continue `tokens` to `out` (cleared first).
  // Zero guesses is a normal answer (no idea: the sequence decodes one token as usual).
  virtual void Propose(std::span<const int32_t> tokens, const SpecParams& params, int max_tokens,
                       std::vector<int32_t>& out) const = 0;
};

// One proposer per method, built once (the scheduler's strategy table).
class ProposerSet {
 public:
  ProposerSet();
  ~ProposerSet();
  // Null for kNone (and for methods not built into this binary).
  const DraftProposer* For(config::SpeculativeMethod method) const;

 private:
  std::unique_ptr<DraftProposer> ngram_;
};

}  // namespace kvserve::speculative
