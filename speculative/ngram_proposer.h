// NgramProposer: prompt-lookup decoding (as vLLM's `ngram` and llama.cpp's lookup decoding).
//
//   tokens: [ ... a b c X Y Z ...... a b c ]      suffix n-gram "a b c" (n = ngram_max first)
//                  ^ most recent earlier match ─► propose "X Y Z ..." (up to k tokens)
//
// n runs from ngram_max down to ngram_min; the first n with a match wins, and among matches
// the most recent one (closest to the end: the likeliest to continue the same way). A
// continuation that runs into the end of the sequence carries on with its own guesses, so a
// sequence in a loop of period p < k still gets k guesses (the loop, repeated).
// Cost: O(len * n) comparisons per n tried, with no allocation.
#pragma once

#include "speculative/draft_proposer.h"

namespace kvserve::speculative {

class NgramProposer final : public DraftProposer {
 public:
  void Propose(int64_t seq, std::span<const int32_t> tokens, const SpecParams& params,
               const DraftKv& kv, int max_tokens, std::vector<int32_t>& out) override {
    (void)seq;
    (void)kv;  // holds no KV
    Guess(tokens, params, max_tokens, out);
  }
  // The guesses themselves (stateless).
  void Guess(std::span<const int32_t> tokens, const SpecParams& params, int max_tokens,
             std::vector<int32_t>& out) const;
};

}  // namespace kvserve::speculative
