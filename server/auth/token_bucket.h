// TokenBucket: a per-minute allowance that refills continuously (capacity / 60 s) up to its
// capacity. It may be driven below zero (a debt): a request's output tokens are only known at
// its end and are charged then, so a burst of long answers delays the next admissions instead
// of being forgotten.
//
//   level ▲ capacity ─────────────╮        ╭───────
//         │                       │ take   ╱ refill: capacity per minute
//         │                       ╰──────╱
//         0 ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─  (may dip below: debt)
//
// Time comes from the caller (an injected base::Clock), so tests refill it exactly. Not
// thread-safe: TenantRateLimiter holds it under its lock.
#pragma once

#include <cstdint>

#include "base/clock.h"

namespace kvserve::server {

class TokenBucket {
 public:
  // Full at `now`. `per_minute` > 0.
  TokenBucket(int64_t per_minute, base::Nanos now);

  int64_t capacity() const { return capacity_; }
  // The level after refilling up to `now` (may be negative: a debt).
  double Level(base::Nanos now);
  // True when `n` could be taken now without going below zero.
  bool CanTake(double n, base::Nanos now);
  // Takes `n` (may leave a debt); a negative `n` gives back, never above capacity.
  void Take(double n, base::Nanos now);
  // Time from `now` until the level reaches `n` (0 when it already has). `n` must not exceed
  // the capacity (it would never be reached).
  base::Nanos TimeUntil(double n, base::Nanos now);
  // Time from `now` until the bucket is full again.
  base::Nanos TimeUntilFull(base::Nanos now) {
    return TimeUntil(static_cast<double>(capacity_), now);
  }

 private:
  void Refill(base::Nanos now);

  int64_t capacity_;
  double level_;
  base::Nanos last_ns_;
};

}  // namespace kvserve::server
