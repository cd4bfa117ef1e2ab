#include "tests/integration/observability/prometheus_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace kvserve::observability::testing {
namespace {

// A port that was free a moment ago. Prometheus cannot report the port it bound when given
// port 0, so the test picks one and retries on the rare collision.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool Exited(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

std::string UrlEncode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::unique_ptr<PrometheusProcess> PrometheusProcess::Start(const std::string& binary, const std::string& config_yaml,
                                                            std::chrono::milliseconds timeout, std::string* error) {
  if (access(binary.c_str(), X_OK) != 0) {
    *error = "Prometheus binary '" + binary + "' not found: install the Debian package `prometheus` (tools/setup.sh)";
    return nullptr;
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto p = std::unique_ptr<PrometheusProcess>(new PrometheusProcess());
    char dir_template[] = "/tmp/kvserve_prometheus_XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    p->dir_ = dir_template;
    std::ofstream(p->dir_ + "/prometheus.yml") << config_yaml;
    std::filesystem::create_directories(p->dir_ + "/data");
    p->port_ = FreePort();
    const std::string log_path = p->dir_ + "/prometheus.log";
    std::vector<std::string> argv = {binary,
                                     "--config.file=" + p->dir_ + "/prometheus.yml",
                                     "--storage.tsdb.path=" + p->dir_ + "/data",
                                     "--web.listen-address=127.0.0.1:" + std::to_string(p->port_),
                                     "--log.level=warn"};
    p->pid_ = fork();
    if (p->pid_ == 0) {
      int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) {
        dup2(log, STDOUT_FILENO);
        dup2(log, STDERR_FILENO);
      }
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited(p->pid_)) {
        exited = true;
        break;
      }
      httplib::Client c("127.0.0.1", p->port_);
      c.set_connection_timeout(1, 0);
      auto res = c.Get("/-/ready");
      if (res && res->status == 200) return p;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a child's readiness
    }
    *error = "Prometheus did not become ready on 127.0.0.1:" + std::to_string(p->port_) + "; log:\n" + p->log();
    if (exited) p->pid_ = -1;
    if (!exited) return nullptr;  // a hang is not a port collision: do not retry
  }
  return nullptr;
}

PrometheusProcess::~PrometheusProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool exited = false;
    while (!(exited = Exited(pid_)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string PrometheusProcess::log() const {
  std::ifstream in(dir_ + "/prometheus.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json PrometheusProcess::Get(const std::string& path_and_query) const {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(30, 0);
  auto res = c.Get(path_and_query.c_str());
  if (!res) return {{"status", "error"}, {"error", "no response from Prometheus"}};
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return {{"status", "error"}, {"error", "not JSON: " + res->body}};
  return j;
}

nlohmann::json PrometheusProcess::Query(const std::string& expr) const {
  return Get("/api/v1/query?query=" + UrlEncode(expr));
}

}  // namespace kvserve::observability::testing
