// EngineClient: the thread-safe facade the front ends call. Submit validates and queues
// a request and hands back its TokenStream; Abort cancels it. Implemented by the real
// Engine (engine.h) and by fakes in front-end tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

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

// A served LoRA adapter as /v1/models lists it.
struct AdapterCard {
  std::string name;
  std::string path;
  bool resident = false;   // held in host memory now
  std::string digest_hex;  // SHA-256 of its weights and config; empty unless resident
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // ---- LoRA adapters (docs/lora.md); engines without them serve none.
  virtual bool serves_adapters() const { return false; }
  virtual bool HasAdapter(const std::string& name) const {
    (void)name;
    return false;
  }
  virtual std::vector<AdapterCard> ListAdapters() const { return {}; }
  // Loads and checks the adapter now (errors name the file and field); AlreadyExists if the
  // name is taken. FailedPrecondition when the server does not serve adapters.
  virtual absl::Status LoadAdapter(const std::string& name, const std::string& path) {
    (void)name, (void)path;
    return absl::FailedPreconditionError("this server does not serve LoRA adapters (lora.enabled)");
  }
  // Forgets the name at once; requests already running on it finish on its weights.
  virtual absl::Status UnloadAdapter(const std::string& name) {
    (void)name;
    return absl::FailedPreconditionError("this server does not serve LoRA adapters (lora.enabled)");
  }

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
