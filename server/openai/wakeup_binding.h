// WakeupBinding: while in scope, a generation's wake-ups (new engine output) notify the
// ConnectionWaiter its HTTP connection thread sleeps on (connection_watch.h). Unbinds on
// destruction, so a waiter that dies with its handler is never notified afterwards.
#pragma once

#include "server/core/generation.h"
#include "server/http/connection_watch.h"

namespace kvserve::server {

class WakeupBinding {
 public:
  WakeupBinding(Generation& generation, ConnectionWaiter& waiter) : generation_(generation) {
    generation_.SetWakeup([&waiter] { waiter.Notify(); });
  }
  ~WakeupBinding() { generation_.SetWakeup(nullptr); }
  WakeupBinding(const WakeupBinding&) = delete;
  WakeupBinding& operator=(const WakeupBinding&) = delete;

 private:
  Generation& generation_;
};

}  // namespace kvserve::server
