// A server binary run as a child process, as a user runs it: real process, real sockets,
// real signals and exit status. Waits for the "kvserve listening http=H:P grpc=H:P" line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::server::testing {

class ServerProcess {
 public:
  // `argv[0]` is the binary. Stdout is read for the listening line; stderr goes to a file
  // (see stderr_text()). Returns null (with a message in `error`) if the line does not come.
  static std::unique_ptr<ServerProcess> Start(const std::vector<std::string>& argv,
                                              std::chrono::milliseconds timeout, std::string* error);
  ~ServerProcess();  // SIGKILL if still running

  const std::string& host() const { return host_; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  std::string grpc_target() const { return host_ + ":" + std::to_string(grpc_port_); }
  pid_t pid() const { return pid_; }  // for /proc/<pid> readings (fds, threads, RSS)

  void Signal(int sig);
  // The exit status once the process ended within `timeout` (-1: killed by a signal).
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);
  std::string stderr_text() const;

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string stderr_path_;
  std::string host_;
  int http_port_ = 0;
  int grpc_port_ = 0;
};

// A fresh temporary directory holding `name` with `content`; returns the file's path.
std::string WriteTempFile(const std::string& name, const std::string& content);

}  // namespace kvserve::server::testing
