// EngineClient: the thread-safe facade the front ends call. Submit validates and queues
// a request and hands back its TokenStream; Abort cancels it. Implemented by the real
// Engine (engine.h) and by fakes in front-end tests.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/request_spec.h"
#include "engine/token_stream.h"

namespace kvserve::engine {

// A snapshot for /health, /ready and load reporting; cheap to call from any thread.
struct EngineStats {
  int running = 0;
  int waiting = 0;
  int swapped = 0;
  double kv_usage = 0.0;  // fraction of the KV pool in use
  bool alive = true;      // false once the loop died (then /health is 503)
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // Errors: InvalidArgument (names the field: e.g. "max_tokens", "prompt" too long),
  // PermissionDenied (the tenant may not use the requested compression policy),
  // ResourceExhausted (waiting queue full, globally or for the tenant),
  // Unavailable (draining or stopped). On success the request is accepted: the stream
  // will always end with a final event, whatever happens.
  virtual absl::StatusOr<std::shared_ptr<TokenStream>> Submit(RequestSpec spec) = 0;

  // Idempotent; unknown or finished ids are ignored. The request's blocks are freed
  // within the next engine step and its stream ends with FinishReason::kAbort.
  virtual void Abort(const std::string& request_id) = 0;

  // Like Abort, for a request the front end saw reach a stop condition the engine does not
  // check (a stop string): its samples still running end with FinishReason::kStop, so that
  // metrics count it as `stop`, not as a client leaving. Engines without the distinction abort.
  virtual void FinishAsStopped(const std::string& request_id) { Abort(request_id); }

  virtual EngineStats Stats() const = 0;
};

}  // namespace kvserve::engine
