// Wall-clock time (nanoseconds since the Unix epoch) behind base::Clock, for the
// "created" timestamps of OpenAI responses. Injected like every clock; tests use
// base::FakeClock set to a fixed date.
#pragma once

#include <chrono>

#include "base/clock.h"

namespace kvserve::server {

class WallClock final : public base::Clock {
 public:
  base::Nanos now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace kvserve::server
