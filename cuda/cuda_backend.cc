#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <bit>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/cache_sizing.h"
#include "cache/host_kv_storage.h"
#include "cuda/cuda_kv_storage.h"
#include "cuda/cuda_llama_model.h"
#include "cuda/cuda_model_runner.h"
#include "model/batch_builder.h"

namespace kvserve::cuda {
namespace {

// Device memory in use after a forward pass at the largest step the scheduler may build, on a
// pool just big enough for it (freed again before measuring).
absl::StatusOr<cache::DeviceMemoryProfile> ProfileForward(CudaLlamaModel& m, const cache::KvLayout& layout,
                                                          int device) {
  const int t = m.max_tokens_per_step();
  const int32_t blocks = (t + layout.block_size - 1) / layout.block_size;
  {
    KVS_ASSIGN_OR_RETURN(std::unique_ptr<CudaKvStorage> pool, CudaKvStorage::Create(layout, blocks + 1, device));
    std::vector<int32_t> tokens(static_cast<size_t>(t), 0), table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 1);  // block 0 plays the null block
    model::BatchBuilder builder(layout.block_size);
    builder.AddSequence(tokens, 0, 0, table, model::LogitsWanted::kLast);
    std::vector<std::byte*> data;
    std::vector<float*> scales;
    for (int l = 0; l < layout.num_layers; ++l) {
      data.push_back(pool->device_layer_data(l));
      scales.push_back(pool->device_layer_scales(l));
    }
    model::KvCacheView view;
    view.layout = layout;
    view.num_blocks = pool->num_blocks();
    view.layer_data = data;
    if (layout.has_scales()) view.layer_scales = scales;
    KVS_RETURN_IF_ERROR(m.ForwardDevice(builder.batch(), view));
    KVS_RETURN_IF_ERROR(m.Synchronize());
  }
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaMemGetInfo: ", cudaGetErrorString(err)));
  }
  cache::DeviceMemoryProfile p;
  p.total_bytes = total_bytes;
  p.peak_used_bytes = total_bytes - free_bytes;
  return p;
}

}  // namespace

absl::StatusOr<engine::Backend> MakeCudaBackend(const config::Config& config, const model::LlamaModel& model,
                                                const compression::PolicyContext* compression,
                                                const base::Logger& logger) {
  return MakeCudaBackendWith(config, model, compression, logger, CudaBackendOptions{});
}

engine::CudaBackendFactory CudaBackendFactoryWith(const CudaBackendOptions& options) {
  return [options](const config::Config& config, const model::LlamaModel& model,
                   const compression::PolicyContext* compression, const base::Logger& logger) {
    return MakeCudaBackendWith(config, model, compression, logger, options);
  };
}

absl::StatusOr<engine::Backend> MakeCudaBackendWith(const config::Config& config, const model::LlamaModel& model,
                                                    const compression::PolicyContext* compression,
                                                    const base::Logger& logger, const CudaBackendOptions& options) {
  if (options.max_kv_blocks < 0) return absl::InvalidArgumentError("cuda: max_kv_blocks must be >= 0");
  const config::CacheConfig& cc = config.cache;
  if (cc.block_size < 8 || cc.block_size > 128 || !std::has_single_bit(static_cast<unsigned>(cc.block_size))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.block_size=", cc.block_size, ": must be a power of two in [8,128]"));
  }
  const int kDevice = config.engine.device;  // engine.device (probed by ResolveBackend)
  CudaModelOptions mo;
  mo.max_tokens_per_step = config.scheduler.max_num_batched_tokens;
  mo.max_logits_rows = std::max(1, config.scheduler.max_num_seqs);
  mo.device = kDevice;
  mo.logger = logger.child("cuda");
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<CudaLlamaModel> dm, CudaLlamaModel::Create(model.config(), model.weights(), mo));
  const cache::KvLayout layout = engine::ConfiguredKvLayout(cc, model);  // split K/V dtypes and int4 included
  KVS_ASSIGN_OR_RETURN(cache::DeviceMemoryProfile profile, ProfileForward(*dm, layout, kDevice));
  const uint64_t budget = cache::DeviceKvBudgetBytes(cc, profile);
  int32_t usable = cache::UsableBlocksForBudget(budget, layout);
  logger.info("cuda: device memory %.2f GiB, %.2f GiB in use after a profiling forward of %d tokens; "
              "cache.gpu_memory_utilization=%.2f leaves %.2f GiB for KV: %d blocks of %zu bytes",
              static_cast<double>(profile.total_bytes) / (1 << 30),
              static_cast<double>(profile.peak_used_bytes) / (1 << 30), mo.max_tokens_per_step,
              cc.gpu_memory_utilization, static_cast<double>(budget) / (1 << 30), usable, layout.bytes_per_block());
  if (usable < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda: no device memory left for KV blocks (", profile.peak_used_bytes, " of ", profile.total_bytes,
        " bytes in use after the profiling forward; raise cache.gpu_memory_utilization or lower "
        "scheduler.max_num_batched_tokens)"));
  }
  if (options.max_kv_blocks > 0 && options.max_kv_blocks < usable) {
    logger.info("cuda: KV pool capped at %d blocks (CudaBackendOptions::max_kv_blocks)", options.max_kv_blocks);
    usable = options.max_kv_blocks;
  }
  engine::Backend b;
  b.kind = config::Backend::kCuda;
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<CudaKvStorage> storage, CudaKvStorage::Create(layout, usable + 1, kDevice));
  KVS_RETURN_IF_ERROR(dm->UseStream(storage->stream()));
  // One host pool for swap and the host prefix tier, as the CPU backend (cache/host_kv_cache.cc).
  const int32_t swap_blocks = cache::UsableBlocksForBudget(cc.host_swap_bytes, layout);
  const int32_t cache_blocks = cache::UsableBlocksForBudget(cc.host_cache_bytes, layout);
  if (static_cast<int64_t>(swap_blocks) + cache_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("cache.host_swap_bytes + cache.host_cache_bytes: too many host blocks");
  }
  const int32_t host_blocks = swap_blocks + cache_blocks;
  if (host_blocks > 0) {
    b.host_allocator = std::make_unique<PinnedHostAllocator>();
    KVS_ASSIGN_OR_RETURN(b.swap, cache::HostKvStorage::Create(layout, host_blocks, b.host_allocator.get()));
  }
  cache::KvCacheManagerOptions opts;
  opts.layout = layout;
  opts.num_blocks = usable + 1;
  opts.num_host_blocks = host_blocks;
  opts.host_cache_blocks = cache_blocks;
  opts.enable_prefix_caching = cc.enable_prefix_caching;
  b.manager = std::make_unique<cache::KvCacheManager>(opts, logger.child("cache"));
  auto runner = std::make_unique<CudaModelRunner>(std::move(dm), *storage, b.swap.get(), compression);
  b.storage = std::move(storage);
  b.runner = std::move(runner);
  return b;
}

}  // namespace kvserve::cuda
