#include "server/signals.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace kvserve::server {
namespace {

// The thread that called Block() and waits for the signals. A signal handler can reach
// nothing else, hence this one process-wide value (set once, before the handler exists).
pthread_t g_waiter;

// Threads started before Block() (a library's static constructors, e.g. a BLAS thread pool)
// do not block the signals, and the kernel may deliver a process-directed SIGTERM to one of
// them: with the default action that kills the daemon instead of draining it (seen as an exit
// by SIGTERM right after start-up). The handler hands the signal to the waiter, which blocks
// it, so its sigwait takes it. pthread_kill is async-signal-safe.
void ForwardToWaiter(int sig) {
  const int saved = errno;
  pthread_kill(g_waiter, sig);
  errno = saved;
}

}  // namespace

TerminationSignals TerminationSignals::Block() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  g_waiter = pthread_self();
  struct sigaction forward {};
  forward.sa_handler = ForwardToWaiter;
  sigfillset(&forward.sa_mask);
  forward.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &forward, nullptr);
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
