#include "server/worker_pool.h"

#include "base/check.h"

namespace kvserve::server {

WorkerPool::WorkerPool(int max_threads) : max_threads_(max_threads) {
  KVS_CHECK(max_threads >= 1, "max_threads=", max_threads);
}

WorkerPool::~WorkerPool() { Shutdown(); }

void WorkerPool::Enqueue(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;
  jobs_.push_back(std::move(job));
  if (jobs_.size() > idle_ && static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  } else {
    cv_.notify_one();
  }
}

void WorkerPool::Shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

int WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

bool WorkerPool::WaitUntilIdle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return jobs_.empty() && idle_ == threads_.size(); });
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    idle_cv_.notify_all();
    cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
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
