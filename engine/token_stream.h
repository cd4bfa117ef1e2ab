// TokenStream: the per-request channel from the engine thread to one consumer (an HTTP
// handler or a gRPC reactor).
//
//   engine thread ──push()──► [ deque<TokenEvent> ] ──pop_wait()/try_pop()──► consumer
//                                  │ closed_ once the final event is pushed
//                                  └ listener_ (optional) fired after each push
//
// Invariants: push() never blocks on the consumer (the queue is unbounded; a request's
// events are token ids, so a slow reader costs little memory); after close() no event is
// accepted; the consumer sees every pushed event exactly once and in order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

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

  // Consumer side: waits up to `timeout` for an event. std::nullopt means "nothing yet"
  // (check done()) — consumers use short timeouts to notice client disconnects.
  std::optional<TokenEvent> pop_wait(std::chrono::milliseconds timeout);
  std::optional<TokenEvent> try_pop();
  // True once closed and drained.
  bool done() const;

  // Called (on the engine thread, without the lock held) after each push and on close.
  // Push-style consumers (gRPC reactors) use it to wake up. Set before the stream is
  // handed to the engine, or under the consumer's own synchronisation.
  void set_listener(std::function<void()> listener);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool closed_ = false;
  std::function<void()> listener_;
};

}  // namespace kvserve::engine
