// ConnectionSockets on its own, and HttpServer letting each handler find its connection's socket.
#include "server/http/connection_sockets.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/logger.h"
#include "server/http/http_server.h"

namespace kvserve::server {
namespace {

// A listening loopback socket and connections to it: {server side, client port}.
class Loopback {
 public:
  Loopback() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listener_, 8), 0);
    socklen_t len = sizeof addr;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~Loopback() {
    for (int fd : fds_) close(fd);
  }
  struct Conn {
    int server = -1;
    int client_port = 0;
  };
  Conn Connect() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    Conn c;
    c.server = accept(listener_, nullptr, nullptr);
    socklen_t len = sizeof addr;
    getsockname(client, reinterpret_cast<sockaddr*>(&addr), &len);
    c.client_port = ntohs(addr.sin_port);
    fds_.push_back(client);
    fds_.push_back(c.server);
    return c;
  }
  int port() const { return port_; }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fds_;
};

TEST(ConnectionSocketsTest, ScansOncePerConnectionAndThread) {
  Loopback lo;
  const Loopback::Conn a = lo.Connect(), b = lo.Connect();
  ConnectionSockets sockets;
  EXPECT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port()), a.server);
  EXPECT_EQ(sockets.scans(), 1);
  // The connection's next requests: the remembered socket is checked, not searched for.
  EXPECT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port()), a.server);
  EXPECT_EQ(sockets.Find("::ffff:127.0.0.1", a.client_port, lo.port()), a.server);
  EXPECT_EQ(sockets.scans(), 1);
  // This thread now serves another connection: found anew.
  EXPECT_EQ(sockets.Find("127.0.0.1", b.client_port, lo.port()), b.server);
  EXPECT_EQ(sockets.scans(), 2);
  // Another thread remembers its own.
  std::optional<int> other;
  std::thread t([&] { other = sockets.Find("127.0.0.1", a.client_port, lo.port()); });
  t.join();
  EXPECT_EQ(other, a.server);
  EXPECT_EQ(sockets.scans(), 3);
  EXPECT_EQ(sockets.Find("127.0.0.1", b.client_port, lo.port()), b.server);
  EXPECT_EQ(sockets.scans(), 3);
}

TEST(ConnectionSocketsTest, NoSocketForAnUnknownPeerOrPort) {
  Loopback lo;
  const Loopback::Conn a = lo.Connect();
  ConnectionSockets sockets;
  EXPECT_EQ(sockets.Find("10.0.0.1", a.client_port, lo.port()), std::nullopt);
  EXPECT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port() == 1 ? 2 : 1), std::nullopt);
  EXPECT_EQ(sockets.Find("127.0.0.1", 0, 0), std::nullopt);
  EXPECT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port()), a.server);
}

TEST(ConnectionSocketsTest, ARememberedDescriptorReusedByAnotherConnectionIsNotTrusted) {
  Loopback lo;
  Loopback::Conn a = lo.Connect();
  ConnectionSockets sockets;
  ASSERT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port()), a.server);
  // The first connection's descriptor now belongs to a new connection (dup2 stands in for
  // close + accept reusing the number): asking for the old peer must not return it.
  const Loopback::Conn b = lo.Connect();
  ASSERT_EQ(dup2(b.server, a.server), a.server);
  EXPECT_EQ(sockets.Find("127.0.0.1", a.client_port, lo.port()), std::nullopt);
}

// The peer port of a socket, or -1.
int PeerPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

TEST(ConnectionSocketsTest, HttpHandlersFindTheirConnectionsSocket) {
  HttpServer server(HttpServerOptions{}, base::Logger());
  server.Get("/peer", [](const HttpRequest& req) {
    HttpResponse r;
    r.content_type = "text/plain";
    const std::optional<int> fd = req.find_socket ? req.find_socket() : std::nullopt;
    // The socket's peer is this request's client.
    r.body = fd && PeerPort(*fd) == req.remote_port ? "match" : "mismatch";
    return r;
  });
  auto port = server.Start();
  ASSERT_TRUE(port.ok());
  httplib::Client a("127.0.0.1", *port), b("127.0.0.1", *port);
  a.set_keep_alive(true);
  b.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {  // keep-alive requests, two connections interleaved
    for (httplib::Client* c : {&a, &b}) {
      auto res = c->Get("/peer");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->body, "match");
    }
  }
  // Hang up first: the server's threads would otherwise wait out the keep-alive timeout.
  a.stop();
  b.stop();
  server.Stop();
}

}  // namespace
}  // namespace kvserve::server
