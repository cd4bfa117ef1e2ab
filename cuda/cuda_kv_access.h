// compression::KvAccess over a CudaKvStorage, through host staging: the first, simple form
// of compression on the CUDA backend (issue 13 asks for device-side scoring and gather later).
//
//   ReadRows(table, layer, kv, head, [begin, end))
//     device runs ──cudaMemcpyAsync per block run──► pinned-free host staging ──► kernels::cpu::DequantizeRows
//   Compact(table, plan)
//     blocks [lo / bs, ceil(phys_len / bs)) of every layer ──D2H──► host copy (identity table)
//     ──► kernels::cpu::CompactKv (the CPU backend's code) ──► blocks up to ceil(new_len / bs) ──H2D──►
//
// So keys are dequantized and rows are moved by exactly the CPU code: scores, keep lists and
// the compacted KV are bit-identical to the CPU backend's for equal KV contents. The cost is a
// round trip of the scored and compacted blocks over PCIe per round (measured by the gpu
// benchmarks, not assumed). All copies run on the storage's stream, after the step's writes;
// each call synchronizes that stream before returning.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "compression/kv_access.h"
#include "cuda/cuda_kv_storage.h"

namespace kvserve::cuda {

class CudaKvAccess final : public compression::KvAccess {
 public:
  explicit CudaKvAccess(CudaKvStorage& storage) : storage_(storage) {}

  const cache::KvLayout& layout() const override { return storage_.layout(); }
  void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                float* out) override;
  compression::CompactStats Compact(std::span<const int32_t> table, const compression::KeepPlan& plan) override;

 private:
  CudaKvStorage& storage_;
  std::vector<std::byte> rows_;
  std::vector<float> row_scales_;
  std::vector<std::vector<std::byte>> data_;   // [layer] staged blocks
  std::vector<std::vector<float>> scales_;     // [layer]
};

}  // namespace kvserve::cuda
