#include "server/auth/token_bucket.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace kvserve::server {
namespace {

constexpr double kMinuteNs = 60e9;
// Refill is computed in floating point; a level this close to the goal counts as there, so
// that e.g. 30 s of a 2-per-minute bucket reliably yields one whole request.
constexpr double kEpsilon = 1e-9;

}  // namespace

TokenBucket::TokenBucket(int64_t per_minute, base::Nanos now)
    : capacity_(per_minute), level_(static_cast<double>(per_minute)), last_ns_(now) {
  KVS_CHECK(per_minute > 0, "a token bucket needs a positive capacity");
}

void TokenBucket::Refill(base::Nanos now) {
  // A clock that steps back (it should not) refills nothing rather than draining.
  if (now <= last_ns_) return;
  const double cap = static_cast<double>(capacity_);
  level_ = std::min(cap, level_ + cap * static_cast<double>(now - last_ns_) / kMinuteNs);
  last_ns_ = now;
}

double TokenBucket::Level(base::Nanos now) {
  Refill(now);
  return level_;
}

bool TokenBucket::CanTake(double n, base::Nanos now) { return Level(now) + kEpsilon >= n; }

void TokenBucket::Take(double n, base::Nanos now) {
  Refill(now);
  level_ = std::min(static_cast<double>(capacity_), level_ - n);
}

base::Nanos TokenBucket::TimeUntil(double n, base::Nanos now) {
  Refill(now);
  const double missing = n - level_;
  if (missing <= kEpsilon) return 0;
  return static_cast<base::Nanos>(std::ceil(missing * kMinuteNs / static_cast<double>(capacity_)));
}

}  // namespace kvserve::server
