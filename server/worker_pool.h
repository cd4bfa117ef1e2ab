// WorkerPool: the HTTP server's connection threads. A streaming response occupies its
// thread for the whole generation, so a fixed small pool would stall every client beyond
// its size; this pool grows on demand, one thread per job that finds no idle thread, up
// to `max_threads` (server.http_max_connections), and keeps its threads until Shutdown.
//
//   Enqueue ─► jobs_ ─► idle worker   (or a new worker while threads_ < max_threads_)
//
// Invariant (under mu_): a new thread is started whenever jobs_.size() > idle_, so no
// queued job waits behind a busy thread while the pool may still grow.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Enqueue(std::function<void()> job);
  // Runs what is queued, then joins every thread. Idempotent.
  void Shutdown();
  int threads() const;
  // Waits until every thread is idle and nothing is queued; false on timeout.
  bool WaitUntilIdle(std::chrono::milliseconds timeout) const;

 private:
  void Work();

  const int max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  mutable std::condition_variable idle_cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace kvserve::server
