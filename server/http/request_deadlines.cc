#include "server/http/request_deadlines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "server/http/connection_watch.h"

namespace kvserve::server {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ToNs(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

// True when the socket's receive queue already holds a whole request head ("\r\n\r\n"
// within httplib's 8 KiB header limit).
bool HeadersBuffered(int fd) {
  char buf[8192];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) return false;
  return std::string_view(buf, static_cast<size_t>(n)).find("\r\n\r\n") != std::string_view::npos;
}

// The peer key of `fd` now, or "" (closed, reused for something else).
std::string PeerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) == nullptr) return {};
    return PeerKey(buf, ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf) == nullptr) return {};
    return PeerKey(buf, ntohs(in6->sin6_port));
  }
  return {};
}

}  // namespace

RequestDeadlines::RequestDeadlines(RequestDeadlineOptions options, std::function<bool()> overloaded)
    : options_(options), overloaded_(std::move(overloaded)) {}

RequestDeadlines::~RequestDeadlines() { Stop(); }

void RequestDeadlines::Start(int local_port) {
  if (thread_.joinable()) return;
  thread_ = std::thread([this, local_port] { Run(local_port); });
}

void RequestDeadlines::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RequestDeadlines::MarkServing(std::string_view peer_addr, int peer_port) {
  Mark(peer_addr, peer_port, State::kServing);
}

void RequestDeadlines::MarkReading(std::string_view peer_addr, int peer_port) {
  Mark(peer_addr, peer_port, State::kReading);
}

void RequestDeadlines::Mark(std::string_view addr, int port, State state) {
  if (port <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  peers_[PeerKey(addr, port)] = Peer{state, NowNs()};
}

void RequestDeadlines::Run(int local_port) {
  const auto interval = std::chrono::nanoseconds(ToNs(options_.scan_interval_seconds));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    Scan(local_port);
    lock.lock();
  }
}

void RequestDeadlines::Scan(int local_port) {
  // The descriptor listing and the overload check run without the lock (Mark* stay cheap).
  const std::vector<ConnectedSocket> sockets = ListConnectedSockets(local_port);
  const bool overloaded = overloaded_ && overloaded_();
  const int64_t limit = ToNs(overloaded ? options_.overload_timeout_seconds : options_.request_timeout_seconds);
  const int64_t now = NowNs();

  absl::flat_hash_set<int> seen;
  absl::flat_hash_set<std::string> live_peers;
  std::vector<std::pair<int, std::string>> to_shut;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ConnectedSocket& s : sockets) {
      seen.insert(s.fd);
      live_peers.insert(s.peer);
      Conn& c = conns_[s.fd];
      if (c.peer != s.peer) c = Conn{s.peer, now, false};  // a new connection on this descriptor
      if (c.shut) continue;
      int64_t since = c.first_seen_ns;
      if (auto p = peers_.find(s.peer); p != peers_.end()) {
        if (p->second.state == State::kServing) continue;
        since = std::max(since, p->second.since_ns);
      }
      if (now - since <= limit) continue;
      to_shut.emplace_back(s.fd, s.peer);
      c.shut = true;
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if (!seen.contains(it->first)) conns_.erase(it);
      it = next;
    }
    // Peers whose connection is gone; a very recent mark may precede the first scan that
    // sees its connection, so those stay a while.
    for (auto it = peers_.begin(); it != peers_.end();) {
      auto next = std::next(it);
      if (!live_peers.contains(it->first) && now - it->second.since_ns > ToNs(2.0)) peers_.erase(it);
      it = next;
    }
  }
  for (const auto& [fd, peer] : to_shut) {
    if (PeerOf(fd) != peer) continue;  // closed (and maybe reused) since the listing
    // Under overload a prompt client waiting for a thread has its whole head buffered: keep it.
    if (overloaded && HeadersBuffered(fd)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = conns_.find(fd); it != conns_.end()) it->second.shut = false;
      continue;
    }
    if (PeerOf(fd) != peer) continue;  // checked again: the peek took time
    ::shutdown(fd, SHUT_RDWR);
    closed_slow_.fetch_add(1);
  }
}

}  // namespace kvserve::server
