// How many KV blocks a memory budget buys. The budget is cache.kv_bytes on the CPU backend
// and cache.gpu_memory_fraction of the free device memory (measured after the weights are
// loaded) with CUDA. The permanent null block comes on top of the budget.
#pragma once

#include <cstdint>
#include <limits>

#include "cache/kv_layout.h"
#include "config/config.h"

namespace kvserve::cache {

// Usable blocks (excluding the null block) that fit in `budget_bytes`.
inline int32_t UsableBlocksForBudget(uint64_t budget_bytes, const KvLayout& layout) {
  const uint64_t per_block = layout.bytes_per_block();
  if (per_block == 0) return 0;
  const uint64_t n = budget_bytes / per_block;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int32_t>::max() - 1);
  return static_cast<int32_t>(n < kMax ? n : kMax);
}

// The KV budget on a CUDA device with `free_device_bytes` free.
inline uint64_t DeviceKvBudgetBytes(const config::CacheConfig& cfg, uint64_t free_device_bytes) {
  const double f = cfg.gpu_memory_fraction < 0.0 ? 0.0 : cfg.gpu_memory_fraction;
  return static_cast<uint64_t>(static_cast<double>(free_device_bytes) * (f > 1.0 ? 1.0 : f));
}

}  // namespace kvserve::cache
