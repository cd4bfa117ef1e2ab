// Slow clients against the real HttpServer on 127.0.0.1: connections that trickle their
// request a byte at a time are closed, and a flood of them does not keep a normal request
// or /health waiting.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "server/http/http_server.h"

namespace kvserve::server {
namespace {

using Clock = std::chrono::steady_clock;

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True once the peer closed the connection (recv returns 0 or an error, not EAGAIN).
bool ClosedByPeer(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

class SlowClientTest : public ::testing::Test {
 protected:
  void StartServer(int max_connections, double request_timeout) {
    HttpServerOptions o;
    o.max_connections = max_connections;
    o.request_timeout_seconds = request_timeout;
    server_ = std::make_unique<HttpServer>(o, base::Logger());
    server_->Get("/health", [](const HttpRequest&) {
      HttpResponse r;
      r.body = "{}";
      return r;
    });
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }
  void TearDown() override {
    for (int fd : slow_) ::close(fd);
    if (server_) server_->Stop();
  }

  // Opens `n` connections that each send the first byte of a request line.
  void OpenTrickling(int n) {
    for (int i = 0; i < n; ++i) {
      int fd = Connect(port_);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::send(fd, "G", 1, MSG_NOSIGNAL), 1);
      slow_.push_back(fd);
    }
  }
  // One more byte on every trickling connection still open.
  void TrickleOnce() {
    for (int fd : slow_) ::send(fd, "E", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::vector<int> slow_;
};

TEST_F(SlowClientTest, AConnectionThatNeverCompletesItsHeadersIsClosed) {
  StartServer(/*max_connections=*/16, /*request_timeout=*/0.5);
  OpenTrickling(1);
  const auto start = Clock::now();
  bool closed = false;
  while (!closed && Clock::now() - start < std::chrono::seconds(5)) {
    TrickleOnce();  // bytes keep arriving: httplib's per-read timeout alone would never fire
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    closed = ClosedByPeer(slow_[0]);
  }
  EXPECT_TRUE(closed);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(waited, 0.4);  // not before its deadline
  EXPECT_LT(waited, 3.0);
}

TEST_F(SlowClientTest, AFloodOfTricklingClientsDoesNotBlockHealth) {
  // 300 trickling connections against 16 threads, a deadline far longer than the test: only
  // the overload rule can free the threads. Like an attacker, every closed connection is
  // opened again at once, so the queue stays full of fresh trickling connections.
  StartServer(/*max_connections=*/16, /*request_timeout=*/60.0);
  OpenTrickling(300);
  std::atomic<bool> stop{false};
  std::atomic<int> reconnects{0};
  std::thread trickler([&] {
    while (!stop.load()) {
      for (int& fd : slow_) {
        if (ClosedByPeer(fd)) {
          ::close(fd);
          fd = Connect(port_);
          if (fd >= 0) ::send(fd, "G", 1, MSG_NOSIGNAL);
          reconnects.fetch_add(1);
        } else {
          ::send(fd, "E", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  double worst = 0.0;
  for (int round = 0; round < 5; ++round) {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(5, 0);
    const auto start = Clock::now();
    auto res = client.Get("/health");
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    worst = std::max(worst, took);
    EXPECT_TRUE(res) << "round " << round << ": " << httplib::to_string(res.error());
    if (res) {
      EXPECT_EQ(res->status, 200);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  stop.store(true);
  trickler.join();
  EXPECT_LT(worst, 1.0) << "slowest /health under the flood, seconds";
  EXPECT_GT(reconnects.load(), 0) << "the flood was cut and came back";
  std::cout << "flood: 300 trickling connections, 16 threads: slowest /health " << worst << " s, "
            << reconnects.load() << " reconnects\n";
}

TEST_F(SlowClientTest, KeepAliveConnectionsServeSeveralRequests) {
  // The deadline restarts after every response: a prompt keep-alive client is not cut.
  StartServer(/*max_connections=*/4, /*request_timeout=*/0.5);
  httplib::Client client("127.0.0.1", port_);
  client.set_keep_alive(true);
  for (int i = 0; i < 4; ++i) {
    auto res = client.Get("/health");
    ASSERT_TRUE(res) << i;
    EXPECT_EQ(res->status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

}  // namespace
}  // namespace kvserve::server
