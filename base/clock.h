// Injected time. The core never calls std::chrono::*::now() directly so tests can
// drive timeouts, latency metrics and fairness deterministically.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvserve::base {

using Nanos = int64_t;  // nanoseconds since an arbitrary, clock-specific epoch

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now_ns() const = 0;
  double now_seconds() const { return static_cast<double>(now_ns()) * 1e-9; }
};

// Monotonic wall time (steady_clock).
class SteadyClock final : public Clock {
 public:
  Nanos now_ns() const override;
};

// Manually advanced clock for tests. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(Nanos start = 0) : now_(start) {}
  Nanos now_ns() const override { return now_.load(std::memory_order_relaxed); }
  void advance_ns(Nanos d) { now_.fetch_add(d, std::memory_order_relaxed); }
  void set_ns(Nanos t) { now_.store(t, std::memory_order_relaxed); }

 private:
  std::atomic<Nanos> now_;
};

}  // namespace kvserve::base
