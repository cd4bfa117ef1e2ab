// A compute backend as the engine sees it: where the KV pool lives, the host swap tier, the
// cache manager sized to them, and the model runner that executes StepPlans on them. The
// engine and the scheduler see only these interfaces; which backend runs is decided once, at
// start-up, by ResolveBackend, and no code branches on it afterwards.
//
//   engine.backend ─► ResolveBackend(requested, device probe, what this build has)
//        cpu  ─► MakeCpuBackend:  HostKvStorage pool (cache.kv_bytes) + host swap tier,
//                                 CpuModelRunner
//        cuda ─► cuda::MakeCudaBackend (cuda/cuda_backend.h, injected through
//                EngineDeps::make_cuda_backend, or loaded from libkvserve_cuda_backend.so
//                through EngineDeps::load_cuda_backend (cuda_backend_loader.h) only once cuda
//                is chosen, so engine/ links no CUDA code and a CPU-only kvserve process
//                never maps cuBLAS): device pool
//                sized from device memory after a profiling forward
//                (cache.gpu_memory_utilization, DeviceKvBudgetBytes), pinned host swap tier,
//                CudaModelRunner
//
// Destruction order: runner first (it refers to the storages), then the manager, then the
// storages. Members are declared in reverse of that.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/kv_cache_manager.h"
#include "cache/kv_storage.h"
#include "cache/layer_groups.h"
#include "compression/compression_policy.h"
#include "compression/key_basis.h"
#include "config/config.h"
#include "engine/model_runner.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"

namespace kvserve::engine {

struct Backend {
  config::Backend kind = config::Backend::kCpu;  // never kAuto
  std::unique_ptr<cache::HostMemoryAllocator> host_allocator;  // the swap tier's (CUDA: pinned); may be null
  std::unique_ptr<cache::KvStorage> storage;     // the KV pool
  std::vector<std::unique_ptr<cache::KvStorage>> demote_tiers;  // demotion tier pools (CPU only)
  std::unique_ptr<compression::PackedKeyBasis> key_basis;        // the low-rank tier's (CPU only)
  std::unique_ptr<cache::KvStorage> swap;        // host swap tier; null when disabled
  std::unique_ptr<cache::KvCacheManager> manager;
  std::unique_ptr<ModelRunner> runner;
};

// What this build of kvserve can run besides the CPU.
struct BackendSupport {
  bool cuda_compiled = false;        // CUDA targets were built (nvcc found at build time)
  bool cuda_runner_available = false;  // a CUDA backend factory or loader was given (EngineDeps)
};
BackendSupport ThisBuildSupports();

// The backend to run for `requested`, and in `why` one line saying why (logged once).
// cpu: always. cuda: FailedPrecondition naming what is missing (no CUDA in this build, no
// usable device, or no CUDA backend factory given). auto: cuda when everything is there, else cpu.
absl::StatusOr<config::Backend> ResolveBackend(config::Backend requested, const kernels::DeviceProbe& probe,
                                               const BackendSupport& support, std::string& why);

// OK when the CUDA backend can hold the configured cache: every K/V dtype pair runs there, but
// demotion tiers (cache.demote_kv_bytes > 0, mixed-precision block tables) and low-rank keys
// (cache.lowrank_key_rank > 0) are CPU-only for now; the error names the setting
// (CreateEngine: engine.backend=cuda fails with it, engine.backend=auto falls back to the CPU).
absl::Status CudaReadsKvPrecision(const config::CacheConfig& cache);

// The KV pool's layout for `model` under cache.* (block size, K and V dtypes, int4 group):
// the CPU's and the CUDA backend's (every dtype pair the cache supports runs on both).
cache::KvLayout ConfiguredKvLayout(const config::CacheConfig& cache, const model::LlamaModel& model);
// The CPU backend's layer groups for `model` (cache/layer_groups.h; off with
// cache.layer_groups=false, and for models that are not hybrid). The CUDA backend keeps one table.
cache::LayerGroups LayerGroupsFor(const config::Config& config, const model::ModelConfig& model);

// Logs "stage memory: layers [b, e) of L, weights W bytes, KV K bytes per token": what this
// process holds of the model (a pipeline stage holds its layers only; docs/parallelism.md).
void LogStageMemory(const model::LlamaModel& model, const cache::KvLayout& layout, const base::Logger& logger);

// Builds a CUDA backend for `model` (cuda::MakeCudaBackend in builds with CUDA).
using CudaBackendFactory = std::function<absl::StatusOr<Backend>(
    const config::Config&, const model::LlamaModel&, const compression::PolicyContext*, const base::Logger&)>;

// The CPU backend: host KV pool and swap tier from cache.* and a CpuModelRunner over `model`.
// `compression` may be null (only `full`). Both must outlive the backend.
absl::StatusOr<Backend> MakeCpuBackend(const config::Config& config, model::LlamaModel& model,
                                       const compression::PolicyContext* compression, const base::Logger& logger);

}  // namespace kvserve::engine
