#include "tests/integration/server/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace kvserve::server::testing {

std::unique_ptr<ServerProcess> ServerProcess::Start(const std::vector<std::string>& argv,
                                                    std::chrono::milliseconds timeout, std::string* error) {
  auto p = std::unique_ptr<ServerProcess>(new ServerProcess());
  char dir_template[] = "/tmp/kvserve_server_XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  p->stderr_path_ = std::string(dir_template) + "/stderr.log";
  int out[2];
  if (pipe(out) != 0) {
    *error = "pipe failed";
    return nullptr;
  }
  p->pid_ = fork();
  if (p->pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    int err = open(p->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO);
    close(out[0]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{out[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);  // the server writes nothing else to stdout
  static const std::regex kLine(R"(kvserve listening http=([^ :]+):(\d+) grpc=([^ :]+):(\d+)\n)");
  std::smatch m;
  if (!std::regex_search(line, m, kLine)) {
    *error = "no listening line; stdout: '" + line + "'; stderr: " + p->stderr_text();
    return nullptr;
  }
  p->host_ = m[1];
  p->http_port_ = std::stoi(m[2]);
  p->grpc_port_ = std::stoi(m[4]);
  return p;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void ServerProcess::Signal(int sig) {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

std::optional<int> ServerProcess::WaitExit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      // A signal death reads as 128 + the signal, as shells report it (never a clean 0).
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child's exit
  }
}

std::string ServerProcess::stderr_text() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string WriteTempFile(const std::string& name, const std::string& content) {
  char dir_template[] = "/tmp/kvserve_cfg_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  std::string path = std::string(dir == nullptr ? "/tmp" : dir) + "/" + name;
  std::ofstream(path) << content;
  return path;
}

}  // namespace kvserve::server::testing
