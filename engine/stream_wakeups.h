// StreamWakeups: the engine thread's deferred consumer wake-ups. While the engine applies
// commands or publishes a step it delivers events quietly (TokenStream::push_quiet /
// close_quiet) and records each stream that now owes its consumer a wake-up; Flush() then
// wakes each of them once.
//
//   Publish: Push(s1, e) Push(s2, e) Push(s1, final) Close(s1) ... ─► Flush(): s1->notify(), s2->notify()
//
// Why: waking a consumer (an HTTP connection thread, a gRPC pump, a client) is a system
// call and makes a thread runnable that competes with the engine for a CPU. Done per event in
// the middle of publishing, each wake-up could preempt the engine while it still had
// streams to feed; done once per stream per batch, a consumer finds the whole step's output
// (its n samples' tokens, the final event and the close) in one wake-up.
//
// Invariants: a stream is recorded at most once per batch; after Flush() nothing is owed;
// recorded streams are held (shared_ptr) until flushed, so a request the engine forgot in the
// meantime still gets its wake-up. Engine thread only. The vector's capacity is kept, so
// steady operation does not allocate.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/request_types.h"
#include "engine/token_stream.h"

namespace kvserve::engine {

class StreamWakeups {
 public:
  StreamWakeups() = default;
  StreamWakeups(const StreamWakeups&) = delete;
  StreamWakeups& operator=(const StreamWakeups&) = delete;

  // Delivers `event` without waking the consumer yet. Returns false if the stream was closed
  // (the event is dropped).
  bool Push(const std::shared_ptr<TokenStream>& stream, TokenEvent event);
  // Closes the stream without waking the consumer yet.
  void Close(const std::shared_ptr<TokenStream>& stream);
  // Wakes every recorded stream once, in the order they were first recorded.
  void Flush();
  size_t owed() const { return owed_.size(); }

 private:
  std::vector<std::shared_ptr<TokenStream>> owed_;
};

}  // namespace kvserve::engine
