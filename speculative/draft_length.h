// DraftLength: how many guesses one sequence drafts in one step (adaptive draft length).
//
// Two inputs, as in goodput-driven schemes (SmartSpec, vLLM's dynamic speculative decoding) and
// the acceptance-driven schedules of SGLang and HF assisted generation:
//  - the sequence's acceptance history: p, the chance that a guess is accepted given that the
//    one before it was. Drafts are modelled as geometric (guess i is accepted with p^i), and p is
//    estimated from decayed counts: accepted guesses over accepted guesses plus rejections (a
//    draft has at most one rejection, its first wrong guess; an all-accepted draft has none).
//  - the batch: a step that decodes N sequences costs about F + c N (F: streaming the weights,
//    the same for any row count; c: one row's compute, in units of F: `row_cost`). One more
//    verify row costs c and yields p^i tokens (its guess i is kept only if all before it were);
//    plain decoding yields N / (F + c N) tokens per unit. So guess i pays iff
//        p^i >= theta(N) = c N / (1 + c N),
//    and the draft is the longest k <= max_k with p^k >= theta. At batch 1 theta is small and
//    long drafts pay; at batch 8 only sequences whose guesses keep being right draft long.
// A draft model also spends g (its forward pass, in units of F: `guess_cost`) on every guess,
// so a guess then costs c + g and pays iff p^i >= (c + g) N / (1 + c N); with g > 0 a sequence
// whose first guess does not pay drafts none (a lookup's guesses cost nothing to propose, so
// with g = 0 at least one is drafted and the AcceptanceGate decides).
// row_cost 0 and guess_cost 0 switch sizing off (every draft is max_k guesses).
// A plain value kept in the scheduler's SequenceState; the rule itself is a pure function.
#pragma once

#include <cstdint>

namespace kvserve::speculative {

// Guesses worth drafting for per-guess acceptance `p` in a step of `batch_seqs` sequences:
// the longest k in [1, max_k] with p^k >= theta(batch_seqs) (at least 1 when guess_cost is 0:
// a sequence that would draft none is left to the AcceptanceGate; 0 when guess_cost > 0 and
// p < theta), max_k when row_cost and guess_cost are both <= 0.
int SizeDraft(double p, int max_k, int batch_seqs, double row_cost, double guess_cost = 0.0);

class DraftLength {
 public:
  static constexpr double kDecay = 0.8;          // weight of the history at each new draft
  static constexpr double kPriorAccepted = 3.0;  // a new sequence starts as if 3 of 4 ...
  static constexpr double kPriorTrials = 4.0;    // ... guesses were accepted (p = 0.75)

  // A verified draft: `drafted` guesses, the first `accepted` of them matched.
  void Record(int drafted, int accepted);
  // The estimated per-guess acceptance p, in [0, 1].
  double acceptance() const { return accepted_ / trials_; }
  int Size(int max_k, int batch_seqs, double row_cost, double guess_cost = 0.0) const {
    return SizeDraft(acceptance(), max_k, batch_seqs, row_cost, guess_cost);
  }

 private:
  double accepted_ = kPriorAccepted;
  double trials_ = kPriorTrials;
};

}  // namespace kvserve::speculative
