#include "server/generation.h"

#include <condition_variable>
#include <mutex>

namespace kvserve::server {

struct Generation::Signal {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t seq = 0;
  std::function<void()> wakeup;

  void Notify() {
    std::lock_guard<std::mutex> lock(mu);
    ++seq;
    cv.notify_all();
    // Called under the lock so that SetWakeup(nullptr) waits for a running wake-up.
    if (wakeup) wakeup();
  }
};

Generation::Generation(std::string id, int num_choices,
                       std::vector<std::unique_ptr<StreamConsumer>> parts, engine::EngineClient& engine,
                       RequestRegistry::Registration registration)
    : id_(std::move(id)),
      num_choices_(num_choices),
      parts_(std::move(parts)),
      signal_(std::make_shared<Signal>()),
      registration_(std::move(registration)) {
  for (auto& part : parts_) {
    part->stream().set_listener([signal = signal_] { signal->Notify(); });
  }
  // The registry may run this on another thread while the Generation is going away, so
  // it holds only the engine and copies of the ids, never the consumers.
  std::vector<std::string> ids;
  for (auto& part : parts_) ids.push_back(part->engine_request_id());
  registration_.set_abort([&engine, ids = std::move(ids)] {
    for (const auto& request_id : ids) engine.Abort(request_id);
  });
}

Generation::~Generation() {
  SetWakeup(nullptr);
  // Unregister first: after this, nobody else can reach the consumers through the registry.
  registration_ = RequestRegistry::Registration();
  if (!done()) Abort();
  for (auto& part : parts_) part->stream().set_listener(nullptr);
}

void Generation::Poll(std::chrono::milliseconds timeout, std::vector<ChoiceDelta>& out) {
  uint64_t seen;
  {
    std::lock_guard<std::mutex> lock(signal_->mu);
    seen = signal_->seq;
  }
  bool any = false;
  for (auto& part : parts_) any |= part->Drain(out);
  if (any || done() || timeout.count() <= 0) return;
  {
    std::unique_lock<std::mutex> lock(signal_->mu);
    signal_->cv.wait_for(lock, timeout, [&] { return signal_->seq != seen; });
  }
  for (auto& part : parts_) part->Drain(out);
}

bool Generation::done() const {
  for (const auto& part : parts_) {
    if (!part->done()) return false;
  }
  return true;
}

UsageSummary Generation::usage() const {
  UsageSummary total;
  for (size_t i = 0; i < parts_.size(); ++i) {
    UsageSummary u = parts_[i]->usage();
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_prompt_tokens += u.cached_prompt_tokens;
    if (i == 0) total.compression = std::move(u.compression);
  }
  return total;
}

void Generation::SetWakeup(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(signal_->mu);
  signal_->wakeup = std::move(fn);
}

void Generation::Abort() {
  for (auto& part : parts_) part->Abort();
}

}  // namespace kvserve::server
