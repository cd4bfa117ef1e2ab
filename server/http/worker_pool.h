// WorkerPool: the HTTP server's connection threads. A streaming response occupies its
// thread for the whole generation, so a fixed small pool would stall every client beyond
// its size; this pool grows on demand, one thread per job that finds no idle thread, up
// to `max_threads` (server.http_max_connections), and shrinks back when the burst is over:
// a thread idle for `idle_timeout` exits while more than `keep_threads` are alive, so thread
// counts return to where they were after a load spike (the soak test checks it).
//
//   Enqueue ─► jobs_ ─► idle worker   (or a new worker while live threads < max_threads_)
//   idle worker ──(idle_timeout, live > keep_threads_)──► exited_ ──► joined by the next
//                                                                     Enqueue / Shutdown
//
// Invariants (under mu_): a new thread is started whenever jobs_.size() > idle_, so no
// queued job waits behind a busy thread while the pool may still grow; every std::thread is
// in threads_ (running Work) or exited_ (returned from Work, not yet joined).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace kvserve::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads, int keep_threads = 2,
                      std::chrono::milliseconds idle_timeout = std::chrono::seconds(5));
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Enqueue(std::function<void()> job);
  // Runs what is queued, then joins every thread. Idempotent.
  void Shutdown();
  // Live threads (running a job or idle), not counting exited ones awaiting their join.
  int threads() const;
  // True while queued jobs outnumber the idle threads and the pool cannot grow: a job waits
  // for a busy thread to finish (RequestDeadlines' overload signal). A job queued while its
  // new thread starts does not count.
  bool saturated() const;
  // Waits until every thread is idle and nothing is queued; false on timeout.
  bool WaitUntilIdle(std::chrono::milliseconds timeout) const;

 private:
  using ThreadList = std::list<std::thread>;
  void Work(ThreadList::iterator self);
  // Takes the exited threads out under mu_, to be joined outside it.
  ThreadList TakeExited();

  const int max_threads_;
  const int keep_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  mutable std::condition_variable idle_cv_;
  std::deque<std::function<void()>> jobs_;
  ThreadList threads_;  // live workers
  ThreadList exited_;   // workers that left Work after idling out; joined later
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace kvserve::server
