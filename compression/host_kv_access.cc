#include "compression/host_kv_access.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::compression {

HostKvAccess::HostKvAccess(const cache::KvLayout& layout, std::span<std::byte* const> layer_data,
                           std::span<float* const> layer_scales)
    : layout_(layout), layer_data_(layer_data), layer_scales_(layer_scales) {
  KVS_CHECK(static_cast<int>(layer_data.size()) == layout.num_layers, "HostKvAccess: ", layer_data.size(),
            " layer arrays for ", layout.num_layers, " layers");
  KVS_CHECK(!layout.has_scales() || static_cast<int>(layer_scales.size()) == layout.num_layers,
            "HostKvAccess: the KV dtype has scales but no scale arrays were given");
}

void HostKvAccess::ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                            float* out) {
  const cache::KvLayout& l = layout_;
  KVS_DCHECK(static_cast<int64_t>(table.size()) * l.block_size >= end);
  const std::byte* data = layer_data_[static_cast<size_t>(layer)];
  KVS_CHECK(data != nullptr, "HostKvAccess: layer ", layer,
            " is a window layer of a layer group: not in this table");
  const float* scales = l.has_scales() ? layer_scales_[static_cast<size_t>(layer)] : nullptr;
  const bool scaled = cache::KvDtypeHasScales(l.side_dtype(kv));
  // One DequantizeRun call per run of consecutive slots inside a block.
  for (int64_t i = begin; i < end;) {
    const int64_t block = table[static_cast<size_t>(i / l.block_size)];
    const int off = static_cast<int>(i % l.block_size);
    const int n = static_cast<int>(std::min<int64_t>(end - i, l.block_size - off));
    kernels::cpu::DequantizeRun(l, kv, data + l.run_byte_offset(block, kv, head),
                                scaled ? scales + l.run_scale_offset(block, kv, head) : nullptr, off, n,
                                out + (i - begin) * l.head_dim);
    i += n;
  }
}

CompactStats HostKvAccess::Compact(std::span<const int32_t> table, const KeepPlan& plan) {
  return kernels::cpu::CompactKv(layout_, layer_data_.data(), layout_.has_scales() ? layer_scales_.data() : nullptr,
                                 table.data(), plan, nullptr, 0);
}

}  // namespace kvserve::compression
