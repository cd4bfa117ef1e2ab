#include "server/http/worker_pool.h"

#include <iterator>

#include "base/check.h"

namespace kvserve::server {

WorkerPool::WorkerPool(int max_threads, int keep_threads, std::chrono::milliseconds idle_timeout)
    : max_threads_(max_threads), keep_threads_(keep_threads), idle_timeout_(idle_timeout) {
  KVS_CHECK(max_threads >= 1, "max_threads=", max_threads);
  KVS_CHECK(keep_threads >= 0, "keep_threads=", keep_threads);
  KVS_CHECK(idle_timeout.count() > 0, "idle_timeout=", idle_timeout.count(), " ms");
}

WorkerPool::~WorkerPool() { Shutdown(); }

WorkerPool::ThreadList WorkerPool::TakeExited() {
  ThreadList out;
  out.splice(out.end(), exited_);
  return out;
}

void WorkerPool::Enqueue(std::function<void()> job) {
  ThreadList exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    jobs_.push_back(std::move(job));
    if (jobs_.size() > idle_ && static_cast<int>(threads_.size()) < max_threads_) {
      // The worker reads `self` only after taking mu_, i.e. after the assignment below.
      threads_.emplace_back();
      const ThreadList::iterator self = std::prev(threads_.end());
      *self = std::thread([this, self] { Work(self); });
    } else {
      cv_.notify_one();
    }
    exited = TakeExited();
  }
  for (auto& t : exited) t.join();
}

void WorkerPool::Shutdown() {
  ThreadList threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    threads.splice(threads.end(), threads_);
  }
  cv_.notify_all();
  // Workers test shutdown_ under mu_ before idling out, so none moves itself to exited_ from
  // here on: exited_ holds only threads that left earlier.
  for (auto& t : threads) t.join();
  ThreadList exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited = TakeExited();
  }
  for (auto& t : exited) t.join();
}

int WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

bool WorkerPool::saturated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size()) >= max_threads_ && jobs_.size() > idle_;
}

bool WorkerPool::WaitUntilIdle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return jobs_.empty() && idle_ == threads_.size(); });
}

void WorkerPool::Work(ThreadList::iterator self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    idle_cv_.notify_all();
    while (jobs_.empty() && !shutdown_) {
      if (cv_.wait_for(lock, idle_timeout_) == std::cv_status::timeout && jobs_.empty() && !shutdown_ &&
          static_cast<int>(threads_.size()) > keep_threads_) {
        // Idled out: leave the live list; the next Enqueue or Shutdown joins this thread.
        --idle_;
        exited_.splice(exited_.end(), threads_, self);
        idle_cv_.notify_all();
        return;
      }
    }
    --idle_;
    if (jobs_.empty()) return;  // shutdown_ and nothing left to run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // release captured state outside the lock
    lock.lock();
  }
}

}  // namespace kvserve::server
