// The real Prometheus server (Debian package `prometheus`) as a child process of a test:
// 127.0.0.1, a free port, a temporary data directory, the given configuration. Only this
// process is ever signalled; its temporary directory is removed at the end.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace kvserve::observability::testing {

class PrometheusProcess {
 public:
  // `config_yaml` is written to <tmp>/prometheus.yml. Returns null (with the reason and
  // Prometheus' log in `error`) if it is not ready within `timeout`.
  static std::unique_ptr<PrometheusProcess> Start(const std::string& binary, const std::string& config_yaml,
                                                  std::chrono::milliseconds timeout, std::string* error);
  ~PrometheusProcess();  // SIGTERM, then SIGKILL after 5 s

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string log() const;

  // GET <path> of the HTTP API, parsed. On a transport or JSON error: {"status": "error",
  // "error": "<why>"}.
  nlohmann::json Get(const std::string& path_and_query) const;
  // /api/v1/query for an instant query of `expr` at the current time.
  nlohmann::json Query(const std::string& expr) const;

 private:
  PrometheusProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

// Percent-encoding for a URL query parameter value.
std::string UrlEncode(const std::string& s);

}  // namespace kvserve::observability::testing
