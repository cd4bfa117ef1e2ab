#include "server/http/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/check.h"

namespace kvserve::server {
namespace {

// Port and numeric address of a socket address (IPv4, IPv6, v4-mapped IPv6).
bool Describe(const sockaddr_storage& ss, int* port, std::string* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    *port = ntohs(in->sin_port);
    if (addr != nullptr && inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) != nullptr) *addr = buf;
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    *port = ntohs(in6->sin6_port);
    if (addr != nullptr && inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf) != nullptr) *addr = buf;
    return true;
  }
  return false;
}

bool SameAddress(std::string_view a, std::string_view b) {
  if (a == b) return true;
  constexpr std::string_view kMapped = "::ffff:";  // "::ffff:127.0.0.1" is 127.0.0.1
  if (a.starts_with(kMapped)) a.remove_prefix(kMapped.size());
  if (b.starts_with(kMapped)) b.remove_prefix(kMapped.size());
  return a == b;
}

}  // namespace

std::string PeerKey(std::string_view addr, int port) {
  constexpr std::string_view kMapped = "::ffff:";
  if (addr.starts_with(kMapped)) addr.remove_prefix(kMapped.size());
  return std::string(addr) + ":" + std::to_string(port);
}

namespace {

// Calls visit(fd, peer_addr, peer_port) for every connected socket of this process whose local
// port is `local_port` (the listening socket has no peer and is skipped), until visit returns
// true. /proc/self/fd is the only way to reach the sockets cpp-httplib accepted.
template <typename Visit>
void ForEachConnectedSocket(int local_port, Visit visit) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int port = 0;
    // getsockname fails (ENOTSOCK) on everything that is not a socket.
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
        !Describe(ss, &port, nullptr) || port != local_port) {
      continue;
    }
    len = sizeof ss;
    std::string addr;
    // The listening socket has no peer (ENOTCONN).
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
        !Describe(ss, &port, &addr)) {
      continue;
    }
    if (visit(static_cast<int>(fd), addr, port)) break;
  }
  closedir(dir);
}

}  // namespace

std::vector<ConnectedSocket> ListConnectedSockets(int local_port) {
  std::vector<ConnectedSocket> out;
  if (local_port <= 0) return out;
  ForEachConnectedSocket(local_port, [&](int fd, const std::string& addr, int port) {
    out.push_back({fd, PeerKey(addr, port)});
    return false;
  });
  return out;
}

std::optional<int> FindConnectionSocket(std::string_view peer_addr, int peer_port, int local_port) {
  if (peer_port <= 0 || local_port <= 0) return std::nullopt;
  std::optional<int> found;
  ForEachConnectedSocket(local_port, [&](int fd, const std::string& addr, int port) {
    if (port != peer_port || !SameAddress(addr, peer_addr)) return false;
    found = fd;
    return true;
  });
  return found;
}

bool IsConnectionSocket(int fd, std::string_view peer_addr, int peer_port, int local_port) {
  if (fd < 0 || peer_port <= 0 || local_port <= 0) return false;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !Describe(ss, &port, nullptr) ||
      port != local_port) {
    return false;
  }
  len = sizeof ss;
  std::string addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !Describe(ss, &port, &addr)) return false;
  return port == peer_port && SameAddress(addr, peer_addr);
}

ConnectionWaiter::ConnectionWaiter(std::optional<int> socket_fd) : socket_fd_(socket_fd) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  KVS_CHECK(event_fd_ >= 0, "eventfd failed, errno ", errno);
}

ConnectionWaiter::~ConnectionWaiter() { close(event_fd_); }

void ConnectionWaiter::Notify() {
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: a wake-up is pending anyway.
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
}

ConnectionWaiter::Wake ConnectionWaiter::Wait(std::chrono::milliseconds timeout) {
  pollfd fds[2];
  fds[0] = pollfd{event_fd_, POLLIN, 0};
  nfds_t n = 1;
  if (socket_fd_) {
    // Only the hang-up: data the client sends (a pipelined request) must not wake us.
    fds[1] = pollfd{*socket_fd_, POLLRDHUP, 0};
    n = 2;
  }
  int r;
  do {
    r = poll(fds, n, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return Wake::kTimeout;
  if (n == 2 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return Wake::kPeerClosed;
  uint64_t count;
  [[maybe_unused]] ssize_t got = read(event_fd_, &count, sizeof count);
  return Wake::kNotified;
}

}  // namespace kvserve::server
