#include "engine/token_stream.h"

#include <iterator>
#include <utility>

namespace kvserve::engine {

bool TokenStream::push(TokenEvent event) {
  Listener listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    events_.push_back(std::move(event));
    listener = TakeWakeLocked();
  }
  Wake(listener);
  return true;
}

void TokenStream::close() {
  Listener listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    listener = TakeWakeLocked();
  }
  Wake(listener);
}

bool TokenStream::push_quiet(TokenEvent event, bool* newly_owed) {
  std::lock_guard<std::mutex> lock(mu_);
  *newly_owed = false;
  if (closed_) return false;
  events_.push_back(std::move(event));
  *newly_owed = !std::exchange(wake_owed_, true);
  return true;
}

bool TokenStream::close_quiet() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  closed_ = true;
  return !std::exchange(wake_owed_, true);
}

void TokenStream::notify() {
  Listener listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!wake_owed_) return;
    listener = TakeWakeLocked();
  }
  Wake(listener);
}

TokenStream::Listener TokenStream::TakeWakeLocked() {
  wake_owed_ = false;
  return listener_;
}

void TokenStream::Wake(const Listener& listener) {
  // Waiters recheck under the lock, so notifying after releasing it is safe (and spares
  // them waking only to block on the mutex the producer still holds).
  cv_.notify_all();
  if (listener && *listener) (*listener)();
}

TokenEvent TokenStream::PopFrontLocked() {
  TokenEvent e = std::move(events_[head_]);
  if (++head_ == events_.size()) {
    events_.clear();  // keeps the capacity
    head_ = 0;
  }
  return e;
}

size_t TokenStream::pop_all(std::vector<TokenEvent>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = events_.size() - head_;
  if (n == 0) return 0;
  if (head_ == 0 && out.empty()) {
    // Trade buffers: both keep their capacity, nothing is copied or allocated.
    out.swap(events_);
  } else {
    out.insert(out.end(), std::make_move_iterator(events_.begin() + static_cast<std::ptrdiff_t>(head_)),
               std::make_move_iterator(events_.end()));
  }
  events_.clear();
  head_ = 0;
  return n;
}

std::optional<TokenEvent> TokenStream::pop_wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return head_ < events_.size() || closed_; });
  if (head_ == events_.size()) return std::nullopt;
  return PopFrontLocked();
}

std::optional<TokenEvent> TokenStream::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (head_ == events_.size()) return std::nullopt;
  return PopFrontLocked();
}

bool TokenStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_ && head_ == events_.size();
}

void TokenStream::set_listener(std::function<void()> listener) {
  Listener l = listener ? std::make_shared<const std::function<void()>>(std::move(listener)) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(l);
}

}  // namespace kvserve::engine
