#include "engine/token_stream.h"

namespace kvserve::engine {

bool TokenStream::push(TokenEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    events_.push_back(std::move(event));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
  return true;
}

void TokenStream::close() {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

std::optional<TokenEvent> TokenStream::pop_wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !events_.empty() || closed_; });
  if (events_.empty()) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<TokenEvent> TokenStream::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool TokenStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_ && events_.empty();
}

void TokenStream::set_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

}  // namespace kvserve::engine
