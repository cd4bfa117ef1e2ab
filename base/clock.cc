#include "base/clock.h"

namespace kvserve::base {

Nanos SteadyClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kvserve::base
