// How many KV blocks a memory budget buys. The budget is cache.kv_bytes on the CPU backend
// and DeviceKvBudgetBytes (cache.gpu_memory_utilization of the device, less what a profiling
// forward peaks at) with CUDA. The permanent null block comes on top of the budget.
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

// The KV budget on a CUDA device, as vLLM sizes it: this instance may use
// `gpu_memory_utilization` of the device's total memory; what the weights, the activations of
// a profiling forward at max_num_batched_tokens and everything else on the device (other
// processes included) already use at that peak is not available for KV.
//
//   budget = utilization * total_bytes - peak_used_bytes        (0 when negative)
//
// peak_used_bytes is total - free measured right after the profiling forward (before the KV
// pool is allocated), so it also counts memory other processes hold.
struct DeviceMemoryProfile {
  uint64_t total_bytes = 0;
  uint64_t peak_used_bytes = 0;
};
inline uint64_t DeviceKvBudgetBytes(const config::CacheConfig& cfg, const DeviceMemoryProfile& profile) {
  double u = cfg.gpu_memory_utilization;
  u = u < 0.0 ? 0.0 : (u > 1.0 ? 1.0 : u);
  const double allowed = u * static_cast<double>(profile.total_bytes);
  const double used = static_cast<double>(profile.peak_used_bytes);
  return allowed > used ? static_cast<uint64_t>(allowed - used) : 0;
}

}  // namespace kvserve::cache
