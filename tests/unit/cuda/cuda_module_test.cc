// The CUDA backend as the kvserve binary gets it: loaded from libkvserve_cuda_backend.so
// (engine/cuda_backend_loader.h) rather than linked. This binary links no CUDA backend code
// (only kvserve_engine), so it checks the module boundary on a machine with a device: the
// module's Backend has a device pool and a runner, and an engine with engine.backend=cuda
// starts through the loader and generates. Needs a GPU (label gpu); on the CPU the loader's
// own tests (tests/unit/engine/cuda_backend_loader_test.cc) cover everything short of a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/cuda_backend_loader.h"
#include "engine/cuda_backend_module.h"
#include "engine/engine_factory.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"

namespace kvserve::engine {
namespace {

// Next to this test binary first (tools/gpu_check.sh bundles copy both), then the build tree.
std::vector<std::string> ModulePaths() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> paths;
  if (!ec) paths.push_back((self.parent_path() / kCudaModuleFileName).string());
  paths.push_back(std::string(KVSERVE_BIN_DIR) + "/" + kCudaModuleFileName);
  return paths;
}

std::string ModelDir() {
  const char* env = std::getenv("KVSERVE_SOURCE_DIR");  // set by tools/gpu_check.sh --bundle
  return std::string(env != nullptr ? env : KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
}

class CudaModule : public testing::Test {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  }
};

TEST_F(CudaModule, BuildsADeviceBackendAcrossTheBoundary) {
  auto m = LoadCudaBackendModule(ModulePaths());
  ASSERT_TRUE(m.ok()) << m.status();
  auto model = model::LlamaModel::Load(ModelDir(), model::ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  config::Config cfg;
  cfg.cache.gpu_memory_utilization = 0.2;
  cfg.scheduler.max_num_batched_tokens = 256;
  auto b = m->factory(cfg, **model, nullptr, base::Logger());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kind, config::Backend::kCuda);
  ASSERT_NE(b->storage, nullptr);
  EXPECT_EQ(b->storage->memory_space(), cache::MemorySpace::kDevice);
  ASSERT_NE(b->runner, nullptr);
  EXPECT_EQ(b->runner->vocab_size(), (*model)->config().vocab_size);
  EXPECT_GT(b->manager->usage().total_blocks, 0);
}

TEST_F(CudaModule, AnEngineWithBackendCudaLoadsItAndGenerates) {
  int loads = 0;
  EngineDeps deps;
  deps.load_cuda_backend = [&loads]() -> absl::StatusOr<CudaBackendFactory> {
    ++loads;
    auto m = LoadCudaBackendModule(ModulePaths());
    if (!m.ok()) return m.status();
    return std::move(m->factory);
  };
  config::Config cfg;
  cfg.engine.backend = config::Backend::kCuda;
  cfg.cache.gpu_memory_utilization = 0.2;
  auto e = CreateEngine(cfg, ModelDir(), deps);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(loads, 1);
  RequestSpec spec;
  spec.request_id = "m";
  spec.prompt_tokens = {1, 300, 301, 302};
  spec.max_tokens = 16;
  spec.ignore_eos = true;
  spec.sampling.temperature = 0.0f;
  auto stream = (*e)->Submit(spec);
  ASSERT_TRUE(stream.ok()) << stream.status();
  size_t tokens = 0;
  std::string error;
  while (!(*stream)->done()) {
    auto ev = (*stream)->pop_wait(std::chrono::milliseconds(200));
    if (!ev) continue;
    tokens += ev->token_ids.size();
    if (!ev->error.empty()) error = ev->error;
  }
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(tokens, 16u);
}

}  // namespace
}  // namespace kvserve::engine
