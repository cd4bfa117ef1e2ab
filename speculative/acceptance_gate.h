// AcceptanceGate: the adaptive switch-off of one sequence's speculation. Each verified draft
// updates an exponential moving average of the accepted share of drafted tokens; when it falls
// below the threshold the sequence stops drafting for a cool-down of decode steps, doubled each
// time it closes again (16, 32, ... 512 steps), then tries again from a neutral average. Text
// that does not repeat itself thus costs at most a few wasted verify rows per cool-down.
// A plain value kept in the scheduler's SequenceState.
#pragma once

#include <cstdint>

namespace kvserve::speculative {

class AcceptanceGate {
 public:
  static constexpr double kAlpha = 0.25;         // weight of the newest draft in the average
  static constexpr int32_t kFirstCooldown = 16;  // decode steps without drafts after a close
  static constexpr int32_t kMaxCooldown = 512;

  // Whether this decode step may draft; a closed gate counts its cool-down down.
  bool Open();
  // A verified draft: `drafted` guesses, `accepted` of them matched.
  void Record(int drafted, int accepted, double min_acceptance);

  double average() const { return average_; }
  int32_t closes() const { return closes_; }

 private:
  double average_ = 1.0;  // optimistic start: a new sequence drafts at once
  int32_t cooldown_left_ = 0;
  int32_t next_cooldown_ = kFirstCooldown;
  int32_t closes_ = 0;
};

}  // namespace kvserve::speculative
