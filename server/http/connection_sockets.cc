#include "server/http/connection_sockets.h"

#include "server/http/connection_watch.h"

namespace kvserve::server {

std::optional<int> ConnectionSockets::Find(std::string_view peer_addr, int peer_port, int local_port) {
  const std::thread::id self = std::this_thread::get_id();
  std::optional<int> remembered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_thread_.find(self); it != by_thread_.end()) remembered = it->second;
  }
  // The system calls run without the lock: other connection threads never wait on them.
  if (remembered && IsConnectionSocket(*remembered, peer_addr, peer_port, local_port)) return remembered;
  std::optional<int> found = FindConnectionSocket(peer_addr, peer_port, local_port);
  std::lock_guard<std::mutex> lock(mu_);
  ++scans_;
  if (!found) {
    by_thread_.erase(self);
    return std::nullopt;
  }
  if (by_thread_.size() >= kMaxRemembered && !by_thread_.contains(self)) by_thread_.clear();
  by_thread_[self] = *found;
  return found;
}

int64_t ConnectionSockets::scans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scans_;
}

}  // namespace kvserve::server
