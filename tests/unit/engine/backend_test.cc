// Backend selection (engine.backend) and the CPU backend's construction.
#include "engine/backend.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/kv_storage.h"
#include "config/config.h"

namespace kvserve::engine {
namespace {

using config::Backend;

kernels::DeviceProbe NoDevice() {
  kernels::DeviceProbe p;
  p.reason = "no CUDA driver";
  return p;
}

kernels::DeviceProbe OneDevice() {
  kernels::DeviceProbe p;
  p.compiled_with_cuda = true;
  p.device_count = 1;
  p.device_name = "NVIDIA H200";
  return p;
}

TEST(ResolveBackend, CpuIsAlwaysAvailable) {
  std::string why;
  for (const kernels::DeviceProbe& probe : {NoDevice(), OneDevice()}) {
    auto b = ResolveBackend(Backend::kCpu, probe, BackendSupport{true, true}, why);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, Backend::kCpu);
    EXPECT_NE(why.find("engine.backend=cpu"), std::string::npos) << why;
  }
}

// engine.device past the devices the process sees (CUDA_VISIBLE_DEVICES): the probe of a
// device that does not exist is not usable, whatever other devices there are.
kernels::DeviceProbe SecondOfOneDevice() {
  kernels::DeviceProbe p = OneDevice();
  p.device = 1;
  p.device_name.clear();
  p.reason =
      "engine.device=1 but this process sees 1 CUDA device(s) (CUDA_VISIBLE_DEVICES applies)";
  return p;
}

TEST(ResolveBackend, CudaNamesWhatIsMissing) {
  std::string why;
  struct Case {
    kernels::DeviceProbe probe;
    BackendSupport support;
    const char* expect;
  };
  const Case cases[] = {
      {OneDevice(), BackendSupport{false, false}, "built without CUDA"},
      {NoDevice(), BackendSupport{true, true}, "no usable CUDA device (no CUDA driver)"},
      {OneDevice(), BackendSupport{true, false},
       "NVIDIA H200 found, but this program was built without the CUDA backend"},
      {SecondOfOneDevice(), BackendSupport{true, true},
       "engine.device=1 but this process sees 1 CUDA device(s)"},
  };
  for (const Case& c : cases) {
    auto b = ResolveBackend(Backend::kCuda, c.probe, c.support, why);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(b.status().message().find("engine.backend=cuda: "), std::string_view::npos)
        << b.status();
    EXPECT_NE(b.status().message().find(c.expect), std::string_view::npos) << b.status();
  }
  auto b = ResolveBackend(Backend::kCuda, OneDevice(), BackendSupport{true, true}, why);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, Backend::kCuda);
  EXPECT_NE(why.find("NVIDIA H200"), std::string::npos) << why;
}

TEST(ResolveBackend, AutoPicksCudaOnlyWhenEverythingIsThere) {
  std::string why;
  auto b = ResolveBackend(Backend::kAuto, OneDevice(), BackendSupport{true, true}, why);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, Backend::kCuda);

  b = ResolveBackend(Backend::kAuto, NoDevice(), BackendSupport{true, true}, why);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, Backend::kCpu);
  EXPECT_NE(why.find("backend: cpu, no usable CUDA device (no CUDA driver)"), std::string::npos)
      << why;

  b = ResolveBackend(Backend::kAuto, OneDevice(), BackendSupport{true, false}, why);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, Backend::kCpu);
  EXPECT_NE(why.find("without the CUDA backend"), std::string::npos) << why;
}

// This build: the probe of this machine (no GPU in CI) never makes auto fail.
TEST(ResolveBackend, AutoOnThisMachineResolves) {
  std::string why;
  auto b = ResolveBackend(Backend::kAuto, kernels::ProbeCudaDevice(), ThisBuildSupports(), why);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(why.empty());
}

TEST(CpuBackend, BuildsAHostPoolSwapTierAndRunnerSizedFromConfig) {
  auto model = model::LlamaModel::Load(std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny",
                                       model::ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  config::Config cfg;
  cfg.cache.block_size = 16;
  cfg.cache.kv_bytes = 4u << 20;
  cfg.cache.host_swap_bytes = 2u << 20;
  auto b = MakeCpuBackend(cfg, **model, nullptr, base::Logger());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kind, Backend::kCpu);
  ASSERT_NE(b->storage, nullptr);
  ASSERT_NE(b->swap, nullptr);
  EXPECT_EQ(b->storage->memory_space(), cache::MemorySpace::kHost);
  EXPECT_EQ(b->swap->memory_space(), cache::MemorySpace::kHost);
  const uint64_t per_block = b->storage->layout().bytes_per_block();
  EXPECT_EQ(static_cast<uint64_t>(b->storage->num_blocks()),
            cfg.cache.kv_bytes / per_block + 1);  // + null block
  EXPECT_EQ(static_cast<uint64_t>(b->swap->num_blocks()), cfg.cache.host_swap_bytes / per_block);
  EXPECT_EQ(b->manager->usage().total_blocks + 1, b->storage->num_blocks());
  EXPECT_EQ(b->runner->vocab_size(), (*model)->config().vocab_size);

  cfg.cache.host_swap_bytes = 0;  // no swap tier
  b = MakeCpuBackend(cfg, **model, nullptr, base::Logger());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->swap, nullptr);

  cfg.cache.k_dtype = config::KvDtype::kInt4;  // split precision: the CPU pool stores it
  cfg.cache.v_dtype = config::KvDtype::kBf16;
  b = MakeCpuBackend(cfg, **model, nullptr, base::Logger());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->storage->layout().k_dtype(), config::KvDtype::kInt4);
  EXPECT_EQ(b->storage->layout().v_dtype(), config::KvDtype::kBf16);
}

// Every K/V dtype pair runs on CUDA; demotion tiers do not yet, and the refusal names the
// setting (CreateEngine turns it into an engine.backend=cuda error or, under auto, the CPU).
TEST(CudaKvPrecision, EveryDtypePairButNoDemotionTiers) {
  config::CacheConfig c;
  c.kv_dtype = config::KvDtype::kInt4;
  EXPECT_TRUE(CudaReadsKvPrecision(c).ok());
  c.kv_dtype = config::KvDtype::kFp16;
  c.v_dtype = config::KvDtype::kInt8;
  EXPECT_TRUE(CudaReadsKvPrecision(c).ok());
  c.demote_kv_bytes = 1 << 20;
  const absl::Status st = CudaReadsKvPrecision(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cache.demote_kv_bytes=1048576"), std::string::npos) << st;
  EXPECT_NE(st.message().find("CPU backend"), std::string::npos) << st;
}

// Low-rank keys are CPU-only too, and the error names their own setting.
TEST(CudaKvPrecision, NoLowRankKeyTiers) {
  config::CacheConfig c;
  c.demote_kv_bytes = 1 << 20;
  c.lowrank_key_rank = 24;
  const absl::Status st = CudaReadsKvPrecision(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cache.lowrank_key_rank=24"), std::string::npos) << st;
  EXPECT_NE(st.message().find("low-rank keys"), std::string::npos) << st;
}

}  // namespace
}  // namespace kvserve::engine
