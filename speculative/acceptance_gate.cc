#include "speculative/acceptance_gate.h"

#include <algorithm>

namespace kvserve::speculative {

bool AcceptanceGate::Open() {
  if (cooldown_left_ == 0) return true;
  --cooldown_left_;
  return false;
}

void AcceptanceGate::Record(int drafted, int accepted, double min_acceptance) {
  if (drafted <= 0) return;
  const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
  average_ = (1.0 - kAlpha) * average_ + kAlpha * rate;
  if (average_ >= min_acceptance) {
    if (rate >= min_acceptance) next_cooldown_ = kFirstCooldown;  // paying again: forgive
    return;
  }
  cooldown_left_ = next_cooldown_;
  next_cooldown_ = std::min(next_cooldown_ * 2, kMaxCooldown);
  ++closes_;
  // Retry from just above the threshold: one more bad draft closes the gate again.
  average_ = std::min(1.0, min_acceptance + kAlpha * (1.0 - min_acceptance));
}

}  // namespace kvserve::speculative
