// KvAccess over host memory: the pool's layer arrays in the cache/kv_layout.h layout (CPU
// backend, HostKvBuffer in tests and the quality evaluation). ReadRows dequantizes through
// kernels/cpu/kv_quant.h, so every KV dtype (fp32, fp16, bf16, fp8_e4m3, int8) scores the
// same way; Compact is kernels::cpu::CompactKv without side arrays.
//
//   physical index i  ->  block table[i / block_size], slot i % block_size
//
// No ownership: the arrays must outlive this object.
#pragma once

#include <cstddef>
#include <span>

#include "compression/kv_access.h"

namespace kvserve::compression {

class HostKvAccess final : public KvAccess {
 public:
  // layer_data: [num_layers]; layer_scales: [num_layers] when layout.has_scales() (checked).
  HostKvAccess(const cache::KvLayout& layout, std::span<std::byte* const> layer_data,
               std::span<float* const> layer_scales);

  const cache::KvLayout& layout() const override { return layout_; }
  void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                float* out) override;
  CompactStats Compact(std::span<const int32_t> table, const KeepPlan& plan) override;

 private:
  cache::KvLayout layout_;
  std::span<std::byte* const> layer_data_;
  std::span<float* const> layer_scales_;
};

}  // namespace kvserve::compression
