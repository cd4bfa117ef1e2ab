#include "server/openai/sse_liveness.h"

#include <algorithm>
#include <utility>

#include "server/http/sse.h"

namespace kvserve::server {

using std::chrono::milliseconds;

namespace {

base::Nanos Ns(milliseconds d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

}  // namespace

SseLiveness::SseLiveness(std::unique_ptr<Generation> generation, std::optional<int> socket_fd,
                         const SseLivenessOptions& options, const base::Clock& clock)
    : generation_(std::move(generation)),
      options_(options),
      clock_(clock),
      waiter_(socket_fd),
      binding_(std::make_unique<WakeupBinding>(*generation_, waiter_)),
      next_keepalive_ns_(clock.now_ns() + SilenceNs()) {}

bool SseLiveness::PollOrWait(const std::string& out, base::Nanos deadline_ns,
                             std::vector<ChoiceDelta>& deltas) {
  deltas.clear();
  generation_->Poll(milliseconds(0), deltas);
  if (!deltas.empty() || generation_->done() || !out.empty()) return true;
  base::Nanos wait_ns = std::max<base::Nanos>(0, next_keepalive_ns_ - clock_.now_ns());
  if (deadline_ns != 0) {
    wait_ns = std::min(wait_ns, std::max<base::Nanos>(0, deadline_ns - clock_.now_ns()));
  }
  const auto wait = std::chrono::duration_cast<milliseconds>(std::chrono::nanoseconds(wait_ns));
  if (waiter_.Wait(wait + milliseconds(wait_ns > 0 ? 1 : 0)) ==
      ConnectionWaiter::Wake::kPeerClosed) {
    generation_->Abort();
    return false;
  }
  generation_->Poll(milliseconds(0), deltas);
  return true;
}

void SseLiveness::KeepAlive(std::string& out) {
  const base::Nanos now = clock_.now_ns();
  if (!out.empty()) {
    next_keepalive_ns_ = now + SilenceNs();
    probe_follow_up_ = false;
  } else if (now >= next_keepalive_ns_) {
    out.append(kSseKeepAlive);
    probe_follow_up_ = !waiter_.watches_peer() && !probe_follow_up_;
    next_keepalive_ns_ = now + (probe_follow_up_ ? Ns(options_.probe_follow_up) : SilenceNs());
  }
}

void SseLiveness::End(bool completed) {
  if (!generation_) return;
  binding_.reset();
  if (!completed && !generation_->done()) generation_->Abort();
  generation_.reset();
}

base::Nanos SseLiveness::SilenceNs() const {
  return Ns(waiter_.watches_peer() ? options_.keepalive_interval : options_.probe_interval);
}

}  // namespace kvserve::server
