#include "server/http/connection_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

namespace kvserve::server {
namespace {

using std::chrono::milliseconds;

// A connected loopback TCP pair: {server side, client side}, plus their ports.
struct TcpPair {
  int listener = -1, server = -1, client = -1;
  int server_port = 0, client_port = 0;

  TcpPair() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    server_port = ntohs(addr.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    server = accept(listener, nullptr, nullptr);
    len = sizeof addr;
    getsockname(client, reinterpret_cast<sockaddr*>(&addr), &len);
    client_port = ntohs(addr.sin_port);
  }
  ~TcpPair() {
    for (int fd : {listener, server, client}) {
      if (fd >= 0) close(fd);
    }
  }
};

TEST(ConnectionWatchTest, FindsTheServerSideSocketOfAConnection) {
  TcpPair a, b;
  EXPECT_EQ(FindConnectionSocket("127.0.0.1", a.client_port, a.server_port), a.server);
  EXPECT_EQ(FindConnectionSocket("127.0.0.1", b.client_port, b.server_port), b.server);
  EXPECT_EQ(FindConnectionSocket("::ffff:127.0.0.1", a.client_port, a.server_port), a.server);
  EXPECT_EQ(FindConnectionSocket("10.0.0.1", a.client_port, a.server_port), std::nullopt);
  EXPECT_EQ(FindConnectionSocket("127.0.0.1", a.client_port, b.server_port), std::nullopt);
  EXPECT_EQ(FindConnectionSocket("127.0.0.1", 0, 0), std::nullopt);
}

TEST(ConnectionWatchTest, WakesOnNotifyTimeoutAndHangUp) {
  TcpPair p;
  ConnectionWaiter waiter(p.server);
  EXPECT_TRUE(waiter.watches_peer());
  EXPECT_EQ(waiter.Wait(milliseconds(1)), ConnectionWaiter::Wake::kTimeout);
  waiter.Notify();
  waiter.Notify();  // coalesced
  EXPECT_EQ(waiter.Wait(milliseconds(5000)), ConnectionWaiter::Wake::kNotified);
  EXPECT_EQ(waiter.Wait(milliseconds(1)), ConnectionWaiter::Wake::kTimeout);
  // Data from the client (a pipelined request) is not a hang-up.
  ASSERT_EQ(send(p.client, "x", 1, 0), 1);
  EXPECT_EQ(waiter.Wait(milliseconds(20)), ConnectionWaiter::Wake::kTimeout);
  std::thread notifier([&] { waiter.Notify(); });
  EXPECT_EQ(waiter.Wait(milliseconds(5000)), ConnectionWaiter::Wake::kNotified);
  notifier.join();
  close(p.client);
  p.client = -1;
  EXPECT_EQ(waiter.Wait(milliseconds(5000)), ConnectionWaiter::Wake::kPeerClosed);
}

TEST(ConnectionWatchTest, WithoutASocketOnlyNotifyWakes) {
  ConnectionWaiter waiter(std::nullopt);
  EXPECT_FALSE(waiter.watches_peer());
  EXPECT_EQ(waiter.Wait(milliseconds(1)), ConnectionWaiter::Wake::kTimeout);
  waiter.Notify();
  EXPECT_EQ(waiter.Wait(milliseconds(5000)), ConnectionWaiter::Wake::kNotified);
}

}  // namespace
}  // namespace kvserve::server
