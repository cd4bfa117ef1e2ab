// SseLiveness: a streaming (SSE) response's generation, how the response waits between engine
// outputs, notices a client that left and ends, shared by the chat/completions streams
// (openai_routes.cc) and the Responses streams (responses_routes.cc).
//
// Between outputs the connection's thread sleeps on its ConnectionWaiter: engine output
// (through a WakeupBinding) or the client hanging up wake it. After `keepalive_interval`
// of silence a keep-alive comment goes out (for proxies' idle timers). Where the
// connection's socket could not be found, liveness is probed instead: a write to a peer
// that has closed succeeds once (the peer answers with a reset) and fails the next time,
// so keep-alive comments go out in pairs `probe_follow_up` apart every `probe_interval`
// of silence.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "server/core/generation.h"
#include "server/core/generation_output.h"
#include "server/http/connection_watch.h"
#include "server/openai/wakeup_binding.h"

namespace kvserve::server {

struct SseLivenessOptions {
  // Longest silence on a stream before an SSE keep-alive comment (for proxies' idle timers).
  std::chrono::milliseconds keepalive_interval{15000};
  // Only where the connection's socket cannot be watched: liveness is probed by writing
  // keep-alive comments in pairs `probe_follow_up` apart after `probe_interval` of silence
  // (worst-case abort delay ~ probe_interval + probe_follow_up).
  std::chrono::milliseconds probe_interval{30};
  std::chrono::milliseconds probe_follow_up{10};
};

// One per streaming response; owns its generation. Only the connection's thread calls it
// (End() included). `options` and `clock` outlive this.
class SseLiveness {
 public:
  SseLiveness(std::unique_ptr<Generation> generation, std::optional<int> socket_fd,
              const SseLivenessOptions& options, const base::Clock& clock);
  SseLiveness(const SseLiveness&) = delete;
  SseLiveness& operator=(const SseLiveness&) = delete;

  // Polls the generation's new output into `deltas` (cleared first). When there is none,
  // the generation still runs and `out` is still empty, sleeps until output, a hang-up,
  // the next keep-alive or `deadline_ns` (clock time; 0: none), then polls again.
  // Returns false when the client hung up: the generation is aborted and the caller
  // cancels the response.
  bool PollOrWait(const std::string& out, base::Nanos deadline_ns,
                  std::vector<ChoiceDelta>& deltas);

  // After a step that did not end the stream: output in `out` restarts the silence timer;
  // silence past it appends a keep-alive comment (one of a probe pair where the socket is
  // not watched).
  void KeepAlive(std::string& out);

  // The response is over: stops the wake-ups, aborts the generation if it still runs and the
  // response did not complete (the client left early), and releases it (and its registry
  // entry) right away. Later calls do nothing; generation() must not be called after.
  void End(bool completed);

  Generation& generation() { return *generation_; }

 private:
  base::Nanos SilenceNs() const;

  std::unique_ptr<Generation> generation_;  // null once End() ran
  const SseLivenessOptions& options_;
  const base::Clock& clock_;
  ConnectionWaiter waiter_;  // outlives the generation's wake-ups (declared before the binding)
  std::unique_ptr<WakeupBinding> binding_;
  base::Nanos next_keepalive_ns_;
  bool probe_follow_up_ = false;  // the next keep-alive completes a probe pair
};

}  // namespace kvserve::server
