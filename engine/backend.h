// A compute backend as the engine sees it: where the KV pool lives, the host swap tier, the
// cache manager sized to them, and the model runner that executes StepPlans on them. The
// engine and the scheduler see only these interfaces; which backend runs is decided once, at
// start-up, by ResolveBackend, and no code branches on it afterwards.
//
//   engine.backend ─► ResolveBackend(requested, device probe, what this build has)
//        cpu  ─► MakeCpuBackend:  HostKvStorage pool (cache.kv_bytes) + host swap tier,
//                                 CpuModelRunner
//        cuda ─► (kernels/cuda + the CUDA runner, issue 13 part 2): device pool sized from
//                device memory after a profiling forward (cache.gpu_memory_utilization,
//                DeviceKvBudgetBytes), pinned host swap tier, CUDA runner
//
// Destruction order: runner first (it refers to the storages), then the manager, then the
// storages. Members are declared in reverse of that.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/kv_cache_manager.h"
#include "cache/kv_storage.h"
#include "compression/compression_policy.h"
#include "config/config.h"
#include "engine/model_runner.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"

namespace kvserve::engine {

struct Backend {
  config::Backend kind = config::Backend::kCpu;  // never kAuto
  std::unique_ptr<cache::KvStorage> storage;     // the KV pool
  std::unique_ptr<cache::KvStorage> swap;        // host swap tier; null when disabled
  std::unique_ptr<cache::KvCacheManager> manager;
  std::unique_ptr<ModelRunner> runner;
};

// What this build of kvserve can run besides the CPU.
struct BackendSupport {
  bool cuda_compiled = false;        // CUDA targets were built (nvcc found at build time)
  bool cuda_runner_available = false;  // the CUDA model runner exists in this build
};
BackendSupport ThisBuildSupports();

// The backend to run for `requested`, and in `why` one line saying why (logged once).
// cpu: always. cuda: FailedPrecondition naming what is missing (no CUDA in this build, no
// usable device, or no CUDA runner yet). auto: cuda when everything is there, else cpu.
absl::StatusOr<config::Backend> ResolveBackend(config::Backend requested, const kernels::DeviceProbe& probe,
                                               const BackendSupport& support, std::string& why);

// The CPU backend: host KV pool and swap tier from cache.* and a CpuModelRunner over `model`.
// `compression` may be null (only `full`). Both must outlive the backend.
absl::StatusOr<Backend> MakeCpuBackend(const config::Config& config, model::LlamaModel& model,
                                       const compression::PolicyContext* compression, const base::Logger& logger);

}  // namespace kvserve::engine
