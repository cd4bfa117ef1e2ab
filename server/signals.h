// The daemon's signals: SIGINT/SIGTERM (drain and stop) and SIGHUP (re-read the
// configuration's API keys) are blocked in the calling thread before any other thread
// exists (every thread inherits the mask, so none of gRPC's, httplib's or the engine's
// threads is interrupted) and then taken synchronously with sigwait in main. SIGHUP's default
// action would end the process, which operators do not expect of a daemon. SIGPIPE is
// ignored: a client that hangs up is an error return from a write, not a process kill.
#pragma once

#include <signal.h>

#include <chrono>
#include <optional>

namespace kvserve::server {

class TerminationSignals {
 public:
  // Must run before the first thread is started.
  static TerminationSignals Block();

  // Blocks until SIGINT, SIGTERM or SIGHUP arrives; returns the signal number.
  int Wait() const;
  // Like Wait, but gives up after `timeout`.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout) const;
  // Like WaitFor, for SIGINT or SIGTERM only: a SIGHUP meanwhile is consumed and ignored.
  std::optional<int> WaitForTermination(std::chrono::milliseconds timeout) const;

 private:
  explicit TerminationSignals(sigset_t set) : set_(set) {}
  sigset_t set_;
};

}  // namespace kvserve::server
