// A CPU-only `kvserve serve` pays nothing for CUDA (docs/reliability.md, "Memory"): the CUDA
// backend and cuBLAS live in libkvserve_cuda_backend.so, loaded only when engine.backend
// resolves to cuda. Before that split a CUDA build of kvserve mapped libcublasLt (~150 MiB of
// RSS) in every process. Reads /proc/<pid>/maps of the real daemon on the bundled model.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/device_probe.h"
#include "tests/integration/server/server_process.h"

namespace kvserve::server::testing {
namespace {

using std::chrono::milliseconds;

constexpr char kConfig[] = R"({
  "logging": {"level": "info"},
  "cache": {"block_size": 16, "kv_bytes": 1572864, "host_swap_bytes": 786432},
  "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0}
})";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

long VmRssKb(pid_t pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

TEST(CpuOnlyProcess, AutoBackendMapsNoCublasAndNoCudaModule) {
  const bool device = kernels::ProbeCudaDevice().usable();
  std::string error;
  auto server = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("cpu.json", kConfig)},
                                     milliseconds(120000), &error);
  ASSERT_NE(server, nullptr) << error;
  const std::string maps = ReadFile("/proc/" + std::to_string(server->pid()) + "/maps");
  ASSERT_FALSE(maps.empty());
  std::cout << "kvserve serve, engine.backend=auto, idle: VmRSS " << VmRssKb(server->pid()) / 1024 << " MiB\n";
  if (device) {
    // The other side of the seam: with a device, auto loads the module (and cuBLAS with it).
    EXPECT_GT(Count(maps, "libkvserve_cuda_backend.so"), 0u) << server->stderr_text();
  } else {
    EXPECT_EQ(Count(maps, "libcublas"), 0u) << "a CPU-only process mapped cuBLAS";
    EXPECT_EQ(Count(maps, "libkvserve_cuda_backend.so"), 0u) << "the CUDA module was loaded without a device";
    // One line says why the CPU runs.
    EXPECT_EQ(Count(server->stderr_text(), "backend: cpu"), 1u) << server->stderr_text();
  }
  server->Signal(SIGTERM);
  EXPECT_EQ(server->WaitExit(milliseconds(30000)), 0) << server->stderr_text();
}

TEST(CpuOnlyProcess, CudaBackendWithoutADeviceFailsNamingWhy) {
  if (kernels::ProbeCudaDevice().usable()) GTEST_SKIP() << "a CUDA device is present";
  std::string error;
  auto server = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("cuda.json", kConfig),
                                      "--backend", "cuda"},
                                     milliseconds(60000), &error);
  EXPECT_EQ(server, nullptr) << "kvserve serve --backend cuda started without a device";
  EXPECT_NE(error.find("engine.backend=cuda"), std::string::npos) << error;
  EXPECT_TRUE(error.find("no usable CUDA device") != std::string::npos ||
              error.find("built without CUDA") != std::string::npos)
      << error;
}

}  // namespace
}  // namespace kvserve::server::testing
