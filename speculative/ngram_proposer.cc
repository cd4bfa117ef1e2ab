#include "speculative/ngram_proposer.h"

#include <algorithm>

namespace kvserve::speculative {

void NgramProposer::Guess(std::span<const int32_t> tokens, const SpecParams& params, int max_tokens,
                          std::vector<int32_t>& out) const {
  out.clear();
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (int n = params.ngram_max; n >= std::max(1, params.ngram_min); --n) {
    if (len < n + 1) continue;  // the suffix needs an earlier occurrence to match
    const int32_t* suffix = tokens.data() + (len - n);
    // Earlier occurrences start at i <= len - n - 1 (not the suffix itself); newest first.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      // Continuation from i + n; past the end it reads its own guesses (i + n < len, so
      // every index it reads is already known).
      for (int j = 0; j < max_tokens; ++j) {
        const int64_t idx = i + n + j;
        out.push_back(idx < len ? tokens[static_cast<size_t>(idx)]
                                : out[static_cast<size_t>(idx - len)]);
      }
      return;
    }
  }
}

}  // namespace kvserve::speculative
