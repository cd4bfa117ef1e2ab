// RequestDeadlines: closes HTTP connections that are too slow to deliver a request, so that
// clients trickling their headers (or body) a byte at a time cannot hold every connection
// thread. cpp-httplib's read timeout is per recv(), which one byte a second never trips, and
// it hands us neither the accepted socket nor a hook before the headers are read, so a
// watchdog finds the server's connections among the process's descriptors (by local port,
// as connection_watch.h does) and learns from the request handlers which peers are being
// served.
//
// Each connection (keyed by its peer address:port) is in one of two states:
//
//   first seen ──► kReading ──(handler starts: MarkServing)──► kServing
//                     ▲                                           │
//                     └──────(response written: MarkReading)──────┘
//
// Every scan (scan_interval) shuts down (shutdown(2), which wakes the blocked recv; httplib
// then closes it) each kReading connection older than `request_timeout`. While the server
// is overloaded (accepted connections wait for a thread) the limit is `overload_timeout`,
// except for a connection whose request head is already buffered in the kernel: that is a
// prompt client waiting for a thread, the one to keep. A request being served is never cut.
//
// A descriptor can be closed and reused between the scan and the shutdown; the peer is
// checked again right before it (the window left is a few system calls long).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"

namespace kvserve::server {

struct RequestDeadlineOptions {
  double request_timeout_seconds = 30.0;   // headers + body of one request, keep-alive wait included
  double overload_timeout_seconds = 0.5;   // the same while connections wait for a thread
  double scan_interval_seconds = 0.1;
};

class RequestDeadlines {
 public:
  // `overloaded`: true while accepted connections wait for a worker thread.
  RequestDeadlines(RequestDeadlineOptions options, std::function<bool()> overloaded);
  ~RequestDeadlines();  // Stop()
  RequestDeadlines(const RequestDeadlines&) = delete;
  RequestDeadlines& operator=(const RequestDeadlines&) = delete;

  // Starts watching the connections accepted on `local_port`. Once.
  void Start(int local_port);
  void Stop();

  // State changes reported by the HTTP layer, by the request's peer address and port.
  void MarkServing(std::string_view peer_addr, int peer_port);
  void MarkReading(std::string_view peer_addr, int peer_port);

  int64_t closed_slow() const { return closed_slow_.load(); }

 private:
  enum class State { kReading, kServing };
  struct Peer {
    State state = State::kReading;
    int64_t since_ns = 0;
  };
  struct Conn {
    std::string peer;
    int64_t first_seen_ns = 0;
    bool shut = false;
  };

  void Mark(std::string_view addr, int port, State state);
  void Run(int local_port);
  void Scan(int local_port);

  const RequestDeadlineOptions options_;
  const std::function<bool()> overloaded_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  absl::flat_hash_map<std::string, Peer> peers_;  // by peer key; set by Mark*
  absl::flat_hash_map<int, Conn> conns_;          // by descriptor; watchdog thread only
  std::atomic<int64_t> closed_slow_{0};
  std::thread thread_;
};

}  // namespace kvserve::server
