// ConnectionSockets: finds the socket of the connection an HTTP handler serves, so that the
// handler can watch it for a hang-up (connection_watch.h) — in one system call or two for
// every request but a connection's first.
//
// cpp-httplib 0.11 gives plain-HTTP handlers neither the socket nor a hook that sees it (its
// process_and_close_socket is private), so the socket has to be found among the process's
// descriptors by its addresses (FindConnectionSocket: a /proc/self/fd scan, two system calls
// per descriptor, 0.2-0.3 ms with a few hundred of them). httplib serves a connection's
// requests one after another on one pool thread, so each thread remembers the socket it last
// found; a later request on that thread checks the remembered socket (IsConnectionSocket:
// same local port and peer address:port, which a live connection has alone) and scans only
// when it is not the request's connection (a new connection on that thread).
//
//   Find(peer, local port) ─► remembered fd of this thread still that connection? ─► fd
//                                             └─ no ─► scan ─► remember ─► fd | nullopt
//
// TLS requests do not need this: their SSL session holds the socket (http_server.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"

namespace kvserve::server {

class ConnectionSockets {
 public:
  // Threads remembered at most; beyond, the memory is dropped (threads of a shrunk pool
  // leave entries behind: this bounds them).
  static constexpr size_t kMaxRemembered = 4096;

  ConnectionSockets() = default;
  ConnectionSockets(const ConnectionSockets&) = delete;
  ConnectionSockets& operator=(const ConnectionSockets&) = delete;

  // The connected socket on `local_port` whose peer is peer_addr:peer_port, for the calling
  // thread (the one serving that connection); nullopt if there is none.
  std::optional<int> Find(std::string_view peer_addr, int peer_port, int local_port);

  // Descriptor scans so far (a remembered socket that still matches costs none).
  int64_t scans() const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::thread::id, int, std::hash<std::thread::id>> by_thread_;
  int64_t scans_ = 0;
};

}  // namespace kvserve::server
