// The process's CPU time, for benchmarks on the shared machine: figures per CPU second are
// what an idle core would give when other processes take wall time (docs/benchmarks.md).
#pragma once

#include <ctime>

namespace kvserve::bench {

// Seconds of CPU time used by every thread of this process so far.
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace kvserve::bench
