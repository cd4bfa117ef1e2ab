#include "server/signals.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace kvserve::server {

TerminationSignals TerminationSignals::Block() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return TerminationSignals(set);
}

int TerminationSignals::Wait() const {
  int sig = 0;
  while (sigwait(&set_, &sig) != 0) {
  }
  return sig;
}

std::optional<int> TerminationSignals::WaitFor(std::chrono::milliseconds timeout) const {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1'000'000);
  for (;;) {
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno != EINTR) return std::nullopt;  // EAGAIN: timed out
  }
}

std::optional<int> TerminationSignals::WaitForTermination(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    const std::optional<int> sig = WaitFor(left);
    if (!sig.has_value() || *sig != SIGHUP) return sig;
  }
}

}  // namespace kvserve::server
