// The CUDA backend as engine::CreateEngine builds it (injected through
// engine::EngineDeps::make_cuda_backend, so engine/ never links CUDA code):
//
//   LlamaModel (host weights) ──► CudaLlamaModel (weights uploaded, scratch for
//                                  scheduler.max_num_batched_tokens rows)
//   profiling forward: one sequence of max_num_batched_tokens tokens on a temporary pool
//   budget = DeviceKvBudgetBytes(cache.gpu_memory_utilization, total, used after profiling)
//   CudaKvStorage(budget / bytes_per_block + 1 null block)  the model runs on its stream
//   HostKvStorage(cache.host_swap_bytes, pinned)             swap tier
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

}  // namespace kvserve::cuda
