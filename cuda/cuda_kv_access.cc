#include "cuda/cuda_kv_access.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "base/check.h"
#include "kernels/cpu/kv_compact.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::cuda {
namespace {

// KvAccess has no error channel: a failing copy means the device is lost, which no round can
// recover from.
void Check(cudaError_t err, const char* what) {
  KVS_CHECK(err == cudaSuccess, "cuda kv access: ", what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

}  // namespace

void CudaKvAccess::ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                            float* out) {
  const cache::KvLayout& l = storage_.layout();
  KVS_CHECK(begin >= 0 && begin <= end && static_cast<int64_t>(table.size()) * l.block_size >= end,
            "cuda kv access: rows [", begin, ", ", end, ") outside a table of ", table.size(), " blocks");
  if (begin == end) return;
  const size_t eb = l.elem_bytes();
  const size_t row_bytes = static_cast<size_t>(l.head_dim) * eb;
  const auto n_rows = static_cast<size_t>(end - begin);
  rows_.resize(n_rows * row_bytes);
  if (l.has_scales()) row_scales_.resize(n_rows);
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const std::byte* data = storage_.device_layer_data(layer);
  const float* scales = storage_.device_layer_scales(layer);
  for (int64_t i = begin; i < end;) {
    const int64_t block = table[static_cast<size_t>(i / l.block_size)];
    const int off = static_cast<int>(i % l.block_size);
    const int n = static_cast<int>(std::min<int64_t>(end - i, l.block_size - off));
    const size_t dst = static_cast<size_t>(i - begin);
    Check(cudaMemcpyAsync(rows_.data() + dst * row_bytes, data + l.elem_offset(block, kv, head, off) * eb,
                          static_cast<size_t>(n) * row_bytes, cudaMemcpyDeviceToHost, stream),
          "reading K/V rows");
    if (l.has_scales()) {
      Check(cudaMemcpyAsync(row_scales_.data() + dst, scales + l.scale_offset(block, kv, head, off),
                            static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, stream),
            "reading K/V scales");
    }
    i += n;
  }
  Check(cudaStreamSynchronize(stream), "synchronizing row reads");
  kernels::cpu::DequantizeRows(rows_.data(), l.has_scales() ? row_scales_.data() : nullptr, static_cast<int>(n_rows),
                               l.head_dim, l.dtype, out);
}

compression::CompactStats CudaKvAccess::Compact(std::span<const int32_t> table, const compression::KeepPlan& plan) {
  const cache::KvLayout& l = storage_.layout();
  const int64_t bs = l.block_size;
  const int64_t nb = (plan.phys_len + bs - 1) / bs;
  KVS_CHECK(static_cast<int64_t>(table.size()) >= nb, "cuda kv access: table shorter than the plan's phys_len");
  const int64_t first = plan.lo / bs;               // blocks before it are never touched
  const int64_t last = (plan.new_len() + bs - 1) / bs;  // blocks from here on are freed
  const size_t block_bytes = l.block_elems() * l.elem_bytes();
  const size_t block_scales = l.block_scales();
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  data_.resize(static_cast<size_t>(l.num_layers));
  scales_.resize(static_cast<size_t>(l.num_layers));
  std::vector<std::byte*> data_ptrs(static_cast<size_t>(l.num_layers));
  std::vector<float*> scale_ptrs(static_cast<size_t>(l.num_layers), nullptr);
  for (int layer = 0; layer < l.num_layers; ++layer) {
    auto& d = data_[static_cast<size_t>(layer)];
    auto& s = scales_[static_cast<size_t>(layer)];
    d.resize(static_cast<size_t>(nb) * block_bytes);
    data_ptrs[static_cast<size_t>(layer)] = d.data();
    if (l.has_scales()) {
      s.resize(static_cast<size_t>(nb) * block_scales);
      scale_ptrs[static_cast<size_t>(layer)] = s.data();
    }
    for (int64_t i = first; i < nb; ++i) {
      const int64_t block = table[static_cast<size_t>(i)];
      Check(cudaMemcpyAsync(d.data() + static_cast<size_t>(i) * block_bytes,
                            storage_.device_layer_data(layer) + static_cast<size_t>(block) * block_bytes, block_bytes,
                            cudaMemcpyDeviceToHost, stream),
            "staging blocks");
      if (l.has_scales()) {
        Check(cudaMemcpyAsync(s.data() + static_cast<size_t>(i) * block_scales,
                              storage_.device_layer_scales(layer) + static_cast<size_t>(block) * block_scales,
                              block_scales * sizeof(float), cudaMemcpyDeviceToHost, stream),
              "staging scales");
      }
    }
  }
  Check(cudaStreamSynchronize(stream), "synchronizing staged blocks");
  std::vector<int32_t> identity(static_cast<size_t>(nb));
  for (int64_t i = 0; i < nb; ++i) identity[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const compression::CompactStats stats = kernels::cpu::CompactKv(
      l, data_ptrs.data(), l.has_scales() ? scale_ptrs.data() : nullptr, identity.data(), plan, nullptr, 0);
  for (int layer = 0; layer < l.num_layers; ++layer) {
    for (int64_t i = first; i < last; ++i) {
      const int64_t block = table[static_cast<size_t>(i)];
      Check(cudaMemcpyAsync(storage_.device_layer_data(layer) + static_cast<size_t>(block) * block_bytes,
                            data_[static_cast<size_t>(layer)].data() + static_cast<size_t>(i) * block_bytes,
                            block_bytes, cudaMemcpyHostToDevice, stream),
            "writing compacted blocks");
      if (l.has_scales()) {
        Check(cudaMemcpyAsync(storage_.device_layer_scales(layer) + static_cast<size_t>(block) * block_scales,
                              scales_[static_cast<size_t>(layer)].data() + static_cast<size_t>(i) * block_scales,
                              block_scales * sizeof(float), cudaMemcpyHostToDevice, stream),
              "writing compacted scales");
      }
    }
  }
  // The host staging is reused by the next call: the uploads must finish first.
  Check(cudaStreamSynchronize(stream), "synchronizing compacted blocks");
  return stats;
}

}  // namespace kvserve::cuda
