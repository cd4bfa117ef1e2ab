// The CUDA backend module seam (engine/cuda_backend_loader.h, engine/cuda_backend_module.h):
// where the module is looked for, the errors a user sees when it is missing or broken, that
// the module this build made loads and refuses cleanly on a machine without a device, and
// that CreateEngine loads it only when engine.backend resolved to cuda.
#include "engine/cuda_backend_loader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/cuda_backend_module.h"
#include "engine/engine_factory.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"

namespace kvserve::engine {
namespace {

std::string ModelDir() { return std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny"; }

TEST(CudaModuleSearchPaths, NextToTheBinaryThenItsLibDirectory) {
  const auto paths = CudaModuleSearchPaths("/opt/kvserve/bin/kvserve");
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], "/opt/kvserve/bin/libkvserve_cuda_backend.so");
  EXPECT_EQ(paths[1], "/opt/kvserve/lib/libkvserve_cuda_backend.so");
}

TEST(LoadCudaBackendModule, MissingModuleNamesEveryPathTried) {
  auto m = LoadCudaBackendModule({"/nonexistent/a/libkvserve_cuda_backend.so", "/nonexistent/b/x.so"});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("/nonexistent/a/libkvserve_cuda_backend.so"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("/nonexistent/b/x.so"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("not installed"), std::string::npos) << m.status();
}

TEST(LoadCudaBackendModule, AFileThatIsNoLibraryIsADlopenError) {
  const std::string path = testing::TempDir() + "/not_a_library.so";
  std::ofstream(path) << "not an ELF file\n";
  auto m = LoadCudaBackendModule({path});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("cannot load the CUDA backend module " + path), std::string::npos)
      << m.status();
}

TEST(LoadCudaBackendModule, ALibraryWithoutTheEntryPointsIsRefused) {
  // Any real shared library without our symbols: the C library (where dladdr lives).
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&dladdr), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  auto m = LoadCudaBackendModule({info.dli_fname});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is not a kvserve CUDA backend module"), std::string::npos) << m.status();
}

#if defined(KVSERVE_HAVE_CUDA)
// The module beside this test binary (the build's bin dir, or a tools/gpu_check.sh bundle that
// carries binaries and module together), else the build's bin dir.
std::string BuiltModule() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::exists(exe.parent_path() / kCudaModuleFileName, ec)) {
    return (exe.parent_path() / kCudaModuleFileName).string();
  }
  return std::string(KVSERVE_BIN_DIR) + "/" + kCudaModuleFileName;
}

// The module the build put next to the binaries resolves every symbol (RTLD_NOW), carries this
// build's id and exports exactly the entry points the loader looks up.
TEST(LoadCudaBackendModule, TheBuiltModuleLoadsAndMatchesThisBuild) {
  auto m = LoadCudaBackendModule({"/nonexistent/first/choice.so", BuiltModule()});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->path, BuiltModule());
  ASSERT_TRUE(static_cast<bool>(m->factory));
  void* h = dlopen(BuiltModule().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto id = reinterpret_cast<const char* (*)()>(dlsym(h, kCudaModuleBuildIdSymbol));
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(std::string(id()), CudaModuleBuildId());
  // The module's own copies of kvserve's libraries stay hidden: nothing but the entry points.
  EXPECT_EQ(dlsym(h, "_ZN7kvserve6engine17CudaModuleBuildIdB5cxx11Ev"), nullptr);
}

// Without a device the module's factory fails with a Status across the boundary (no
// exception, no abort), naming CUDA.
TEST(LoadCudaBackendModule, TheModuleRefusesCleanlyWithoutADevice) {
  if (kernels::ProbeCudaDevice().usable()) GTEST_SKIP() << "a CUDA device is present";
  auto m = LoadCudaBackendModule({BuiltModule()});
  ASSERT_TRUE(m.ok()) << m.status();
  auto model = model::LlamaModel::Load(ModelDir(), model::ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  config::Config cfg;
  cfg.scheduler.max_num_batched_tokens = 64;
  auto b = m->factory(cfg, **model, nullptr, base::Logger());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("cuda"), std::string::npos) << b.status();
}
#endif

// CreateEngine asks for the module only when CUDA was chosen: on a machine without a device
// auto runs on the CPU without loading it, and cuda fails naming the missing device.
TEST(CreateEngineCudaLoading, NoDeviceNeverLoadsTheModule) {
  if (kernels::ProbeCudaDevice().usable()) GTEST_SKIP() << "a CUDA device is present";
  int loads = 0;
  auto loader = [&loads]() -> absl::StatusOr<CudaBackendFactory> {
    ++loads;
    return absl::UnavailableError("must not be called");
  };
  config::Config cfg;
  cfg.cache.kv_bytes = 1u << 20;
  cfg.cache.host_swap_bytes = 0;
  cfg.engine.backend = config::Backend::kAuto;
  EngineDeps deps;
  deps.load_cuda_backend = loader;
  auto e = CreateEngine(cfg, ModelDir(), deps);
  ASSERT_TRUE(e.ok()) << e.status();
  e->reset();

  cfg.engine.backend = config::Backend::kCuda;
  auto c = CreateEngine(cfg, ModelDir(), deps);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("engine.backend=cuda"), std::string::npos) << c.status();
  EXPECT_EQ(loads, 0);
}

// With a device, a module that cannot be loaded sends auto to the CPU and fails cuda with the
// loader's message.
TEST(CreateEngineCudaLoading, AFailedLoadFallsBackUnderAutoAndFailsCuda) {
  if (!kernels::ProbeCudaDevice().usable()) GTEST_SKIP() << "needs a CUDA device (the probe decides first)";
  int loads = 0;
  EngineDeps deps;
  deps.load_cuda_backend = [&loads]() -> absl::StatusOr<CudaBackendFactory> {
    ++loads;
    return absl::FailedPreconditionError("module missing for the test");
  };
  config::Config cfg;
  cfg.cache.kv_bytes = 1u << 20;
  cfg.cache.host_swap_bytes = 0;
  cfg.engine.backend = config::Backend::kAuto;
  auto e = CreateEngine(cfg, ModelDir(), deps);
  ASSERT_TRUE(e.ok()) << e.status();
  e->reset();
  cfg.engine.backend = config::Backend::kCuda;
  auto c = CreateEngine(cfg, ModelDir(), deps);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("engine.backend=cuda: module missing for the test"), std::string::npos)
      << c.status();
  EXPECT_EQ(loads, 2);
}

}  // namespace
}  // namespace kvserve::engine
