#include "server/core/stream_pump.h"

namespace kvserve::server {

StreamPump::StreamPump() : thread_([this] { Run(); }) {}

StreamPump::~StreamPump() { Stop(); }

void StreamPump::Schedule(std::weak_ptr<Pumpable> target) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(target));
  }
  cv_.notify_one();
}

void StreamPump::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void StreamPump::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (stopping_) return;
    std::weak_ptr<Pumpable> weak = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (std::shared_ptr<Pumpable> target = weak.lock()) target->Pump();
    lock.lock();
  }
}

}  // namespace kvserve::server
