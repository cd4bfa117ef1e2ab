// A real redis-server (Debian package) run by a test on 127.0.0.1 and a free port; only the
// process started here is ever signalled. Header-only: shared by the remote-tier tests.
#pragma once

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace kvserve::cache::testing {

inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return 0;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Integer reply of one command, -1 on any failure.
inline long long RedisInteger(int port, const char* command) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  long long v = -1;
  if (c != nullptr && c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, command));
    if (r != nullptr && r->type == REDIS_REPLY_INTEGER) v = r->integer;
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return v;
}

inline bool RedisPings(int port) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

class RedisProcess {
 public:
  explicit RedisProcess(int port) : port_(port) { Start(); }
  ~RedisProcess() { Kill(); }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  // (Re)starts the server on the same port; waits until it answers PING (up to 5 s).
  void Start() {
    if (pid_ > 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      const std::string p = std::to_string(port_);
      execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru", "--loglevel",
             "warning", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 100 && !RedisPings(port_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool ready() const { return RedisPings(port_); }
  int port() const { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

}  // namespace kvserve::cache::testing
