// TokenStream: the per-request channel from the engine thread to one consumer (an HTTP
// handler or a gRPC reactor).
//
//   engine thread ──push()──────────► [ events_ ] ──pop_all()/try_pop()/pop_wait()──► consumer
//                 ──push_quiet()──►      │ closed_ once the final event is pushed
//                   ... notify() ────────┴ listener_ (optional) and the condition variable
//
// push() and close() wake the consumer at once. The engine delivers a whole step's events
// with push_quiet()/close_quiet() and wakes each stream once afterwards (notify(), see
// StreamWakeups), so a consumer wakes once per step, not once per event, and never while the
// engine is still publishing.
//
// Invariants: pushing never blocks on the consumer (the queue is unbounded; a request's
// events are token ids, so a slow reader costs little memory) and takes the lock only for an
// append; after close no event is accepted; the consumer sees every pushed event exactly once
// and in order. The queue's storage is reused, so steady streaming does not allocate in here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/request_types.h"

namespace kvserve::engine {

class TokenStream {
 public:
  TokenStream() = default;
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  // Engine side. Returns false (and drops the event) if the stream was already closed.
  bool push(TokenEvent event);
  // Engine side: no more events will come (pushed after the final event of every sample,
  // or when the request is rejected/aborted).
  void close();

  // Engine side, batched: as push()/close() without waking the consumer. `*newly_owed`
  // (push_quiet) and close_quiet's result are true when the call left the stream owing its
  // consumer a wake-up it did not owe before: the caller must then call notify() once its
  // batch is complete. push_quiet returns false (and drops the event) if already closed.
  bool push_quiet(TokenEvent event, bool* newly_owed);
  bool close_quiet();
  // Wakes the consumer (waiters and the listener) for what push_quiet/close_quiet added.
  void notify();

  // Consumer side: appends every event queued now to `out` (one lock, however many).
  // Returns the number appended.
  size_t pop_all(std::vector<TokenEvent>& out);
  // Waits up to `timeout` for an event. std::nullopt means "nothing yet" (check done()) —
  // consumers use short timeouts to notice client disconnects.
  std::optional<TokenEvent> pop_wait(std::chrono::milliseconds timeout);
  std::optional<TokenEvent> try_pop();
  // True once closed and drained.
  bool done() const;

  // Called (on the engine thread, without the lock held) after each push and on close, or
  // once per notify() for batched deliveries. Push-style consumers (gRPC reactors) use it
  // to wake up. Set before the stream is handed to the engine, or under the consumer's own
  // synchronisation.
  void set_listener(std::function<void()> listener);

 private:
  using Listener = std::shared_ptr<const std::function<void()>>;
  // Under mu_: takes the pending wake-up, returning the listener to call (copied as a
  // shared_ptr: no allocation on the engine thread).
  Listener TakeWakeLocked();
  void Wake(const Listener& listener);
  // Under mu_: the front event, moved out.
  TokenEvent PopFrontLocked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Queued events are events_[head_, end); storage is kept (clear()) once they are taken.
  std::vector<TokenEvent> events_;
  size_t head_ = 0;
  bool closed_ = false;
  bool wake_owed_ = false;  // push_quiet/close_quiet added something since the last notify()
  Listener listener_;
};

}  // namespace kvserve::engine
