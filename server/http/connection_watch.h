// Noticing that an HTTP client went away while its request is still generating, without
// writing to it. cpp-httplib does not expose a connection's socket to handlers, so the
// socket is found among the process's descriptors by its addresses (the one whose local
// port and peer address:port match the request), once per connection (ConnectionSockets
// remembers it for the connection's later requests).
//
//   engine push ─► Generation wake-up ─► ConnectionWaiter::Notify() ─► eventfd
//   handler thread: poll({eventfd: POLLIN, socket: POLLRDHUP}) ─► kNotified | kPeerClosed
//
// A client that closes its connection (FIN or RST) is seen at once, with no periodic
// wake-ups or writes. The socket belongs to the handler's connection for as long as the
// handler runs, so the descriptor cannot be reused under it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server {

// The connected TCP socket with these local port and peer address/port, if any. Scans the
// process's descriptors (two system calls each): ConnectionSockets calls it once per connection.
std::optional<int> FindConnectionSocket(std::string_view peer_addr, int peer_port, int local_port);
// Whether `fd` is now the connected TCP socket with these local port and peer address/port
// (two system calls). A live connection's 4-tuple is unique, so a match is that connection.
bool IsConnectionSocket(int fd, std::string_view peer_addr, int peer_port, int local_port);

struct ConnectedSocket {
  int fd = -1;
  std::string peer;  // "addr:port", v4-mapped IPv6 addresses written as IPv4
};
// Every connected TCP socket of the process with this local port (accepted connections).
std::vector<ConnectedSocket> ListConnectedSockets(int local_port);
// The "addr:port" key ListConnectedSockets uses for a peer.
std::string PeerKey(std::string_view addr, int port);

class ConnectionWaiter {
 public:
  // `socket_fd`: the connection to watch for a hang-up; nullopt watches nothing.
  explicit ConnectionWaiter(std::optional<int> socket_fd);
  ~ConnectionWaiter();
  ConnectionWaiter(const ConnectionWaiter&) = delete;
  ConnectionWaiter& operator=(const ConnectionWaiter&) = delete;

  // Wakes Wait(). Thread-safe and non-blocking (one eventfd write).
  void Notify();

  enum class Wake { kNotified, kPeerClosed, kTimeout };
  // Returns as soon as Notify() was called (since the last Wait), the peer hung up, or
  // `timeout` passed.
  Wake Wait(std::chrono::milliseconds timeout);
  bool watches_peer() const { return socket_fd_.has_value(); }

 private:
  std::optional<int> socket_fd_;
  int event_fd_ = -1;
};

}  // namespace kvserve::server
