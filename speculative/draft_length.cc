#include "speculative/draft_length.h"

#include <algorithm>

namespace kvserve::speculative {

int SizeDraft(double p, int max_k, int batch_seqs, double row_cost, double guess_cost) {
  row_cost = std::max(row_cost, 0.0);
  guess_cost = std::max(guess_cost, 0.0);
  if (max_k <= 0 || (row_cost == 0.0 && guess_cost == 0.0)) return std::max(max_k, 0);
  const double n = static_cast<double>(std::max(batch_seqs, 1));
  const double theta = (row_cost + guess_cost) * n / (1.0 + row_cost * n);
  if (guess_cost > 0.0 && p < theta) return 0;  // not even the first guess pays its draft pass
  if (max_k == 1) return 1;
  // p^k only falls with k: walk it down (max_k <= 16, no logarithms needed).
  int k = 1;
  double reach = p * p;
  while (k < max_k && reach >= theta) {
    ++k;
    reach *= p;
  }
  return k;
}

void DraftLength::Record(int drafted, int accepted) {
  if (drafted <= 0) return;
  const double rejections = accepted < drafted ? 1.0 : 0.0;
  accepted_ = kDecay * accepted_ + static_cast<double>(accepted);
  trials_ = kDecay * trials_ + static_cast<double>(accepted) + rejections;
}

}  // namespace kvserve::speculative
