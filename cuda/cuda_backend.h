// The CUDA backend as engine::CreateEngine builds it (injected through
// engine::EngineDeps::make_cuda_backend, so engine/ never links CUDA code):
//
//   LlamaModel (host weights) ──► CudaLlamaModel (weights uploaded, scratch for
//                                  scheduler.max_num_batched_tokens rows)
//   profiling forward: one sequence of max_num_batched_tokens tokens on a temporary pool
//   budget = DeviceKvBudgetBytes(cache.gpu_memory_utilization, total, used after profiling)
//   CudaKvStorage(budget / bytes_per_block + 1 null block)  the model runs on its stream
//   HostKvStorage(cache.host_swap_bytes + host_cache_bytes, pinned)  swap and host prefix tier
//   KvCacheManager, CudaModelRunner (owns the device model)
//
// The host LlamaModel stays loaded: compression's PolicyContext reads its config and RoPE
// table, and CreateEngine owns it.
#pragma once

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "compression/compression_policy.h"
#include "config/config.h"
#include "engine/backend.h"
#include "model/llama_model.h"

namespace kvserve::cuda {

absl::StatusOr<engine::Backend> MakeCudaBackend(const config::Config& config, const model::LlamaModel& model,
                                                const compression::PolicyContext* compression,
                                                const base::Logger& logger);

// Test and benchmark knobs that are not configuration (the server uses MakeCudaBackend).
struct CudaBackendOptions {
  // > 0: at most this many usable KV blocks in the device pool (plus the null block), whatever
  // the memory budget allows, so a test can give the CUDA engine exactly the CPU engine's pool
  // (cache::UsableBlocksForBudget(cache.kv_bytes, layout)) and compare preemption.
  int32_t max_kv_blocks = 0;
};
absl::StatusOr<engine::Backend> MakeCudaBackendWith(const config::Config& config, const model::LlamaModel& model,
                                                    const compression::PolicyContext* compression,
                                                    const base::Logger& logger, const CudaBackendOptions& options);
// MakeCudaBackendWith bound to `options`, as EngineDeps::make_cuda_backend takes it.
engine::CudaBackendFactory CudaBackendFactoryWith(const CudaBackendOptions& options);

}  // namespace kvserve::cuda
