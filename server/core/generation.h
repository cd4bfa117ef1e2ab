// Generation: one client request in flight, i.e. one or more engine requests (a completion
// with several prompts submits one per prompt) read through StreamConsumers, plus its
// registry entry. Pull-style consumers (HTTP handlers) call Poll() with a short timeout;
// push-style consumers (gRPC reactors) install a wake-up and call Poll(0).
//
//   engine thread: stream.push_quiet ... notify ──listener──► Signal { ++seq; cv.notify; wakeup() }
//   consumer:      Poll(timeout): drain all parts; if nothing, wait on Signal, drain again
//
// The listeners hold the Signal by shared_ptr, so an engine that pushes after the
// Generation is gone touches nothing freed. Destroying an unfinished Generation aborts its
// engine requests (the client went away).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/core/generation_output.h"
#include "server/core/request_registry.h"
#include "server/core/stream_consumer.h"
#include "server/errors/rate_limit_status.h"

namespace kvserve::server {

class Generation {
 public:
  // `engine` (which outlives every generation) runs the parts' engine requests.
  Generation(std::string id, int num_choices, std::vector<std::unique_ptr<StreamConsumer>> parts,
             engine::EngineClient& engine, RequestRegistry::Registration registration);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  const std::string& id() const { return id_; }
  int num_choices() const { return num_choices_; }

  // Appends the deltas available now; if there are none, waits up to `timeout` for the
  // engine and tries once more. Consumer thread only.
  void Poll(std::chrono::milliseconds timeout, std::vector<ChoiceDelta>& out);
  // Every part finished: all choices have their final delta and usage is complete.
  bool done() const;
  UsageSummary usage() const;  // summed over the parts

  // Runs `fn` (on the engine's thread, once per engine step with output for this
  // generation, outside any lock of it; it must only schedule work, never call back into
  // this Generation) whenever new output may be waiting. nullptr detaches; after SetWakeup
  // returns, the previous function no longer runs (SetWakeup waits for a call in progress).
  void SetWakeup(std::function<void()> fn);
  // Aborts every engine request still running. Thread-safe.
  void Abort();

  // The tenant's rate-limit state at admission (limit 0 everywhere: not limited), for the
  // response's x-ratelimit-* headers.
  void set_rate_limit(const RateLimitState& state) { rate_limit_ = state; }
  const RateLimitState& rate_limit() const { return rate_limit_; }
  // Runs once from the destructor with the final usage (the rate limiter's output-token
  // reconciliation). It must not call back into this Generation.
  void set_on_end(std::function<void(const UsageSummary&)> fn) { on_end_ = std::move(fn); }

 private:
  struct Signal;
  std::string id_;
  int num_choices_;
  std::vector<std::unique_ptr<StreamConsumer>> parts_;
  std::shared_ptr<Signal> signal_;
  RequestRegistry::Registration registration_;
  RateLimitState rate_limit_;
  std::function<void(const UsageSummary&)> on_end_;
};

}  // namespace kvserve::server
