#include "server/core/generation.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace kvserve::server {

// The engine thread's wake-ups of one generation. The wake-up function runs outside the
// lock: it wakes a consumer thread (an eventfd write, a pump schedule), and a consumer woken
// while the engine thread still held the lock could run at once, block on it and need a
// second wake-up to go on (a lock convoy, per token on a busy machine). `running` counts calls
// in progress so that SetWakeup can still promise that the previous function has returned.
// `seq` is written under the lock (so waiters on `cv` miss nothing) and read without it by
// Poll, so Poll(0), the pull-style consumers' call, takes no lock here at all.
struct Generation::Signal {
  using Wakeup = std::shared_ptr<const std::function<void()>>;
  std::mutex mu;
  std::condition_variable cv;       // Poll with a timeout waits here for `seq` to move
  std::condition_variable idle_cv;  // SetWakeup waits here for `running` to reach 0
  std::atomic<uint64_t> seq{0};
  Wakeup wakeup;                    // copied (a reference count, no allocation) per call
  int running = 0;

  void Notify() {
    Wakeup fn;
    {
      std::lock_guard<std::mutex> lock(mu);
      seq.fetch_add(1, std::memory_order_release);
      if (wakeup) {
        fn = wakeup;
        ++running;
      }
    }
    cv.notify_all();
    if (!fn) return;
    (*fn)();
    std::lock_guard<std::mutex> lock(mu);
    if (--running == 0) idle_cv.notify_all();
  }

  void Set(std::function<void()> f) {
    Wakeup next = f ? std::make_shared<const std::function<void()>>(std::move(f)) : nullptr;
    std::unique_lock<std::mutex> lock(mu);
    const bool had = wakeup != nullptr;
    wakeup = std::move(next);
    // Calls that took the previous function before the swap may still run it.
    if (had) idle_cv.wait(lock, [this] { return running == 0; });
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
  if (on_end_) on_end_(usage());
}

void Generation::Poll(std::chrono::milliseconds timeout, std::vector<ChoiceDelta>& out) {
  const uint64_t seen = signal_->seq.load(std::memory_order_acquire);
  bool any = false;
  for (auto& part : parts_) any |= part->Drain(out);
  if (any || done() || timeout.count() <= 0) return;
  {
    std::unique_lock<std::mutex> lock(signal_->mu);
    signal_->cv.wait_for(lock, timeout, [&] { return signal_->seq.load(std::memory_order_relaxed) != seen; });
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
    total.spec_draft_tokens += u.spec_draft_tokens;
    total.spec_accepted_tokens += u.spec_accepted_tokens;
    if (i == 0) total.compression = std::move(u.compression);
  }
  return total;
}

void Generation::SetWakeup(std::function<void()> fn) { signal_->Set(std::move(fn)); }

void Generation::Abort() {
  for (auto& part : parts_) part->Abort();
}

}  // namespace kvserve::server
