// compression::KvAccess over a CudaKvStorage: compression rounds on the CUDA backend.
//
//   ScoreTriAttention(table, layer, kv_head, [begin, end), weights)       (TriAttention)
//     weights (virtual queries, norm weights: KiB) ──H2D──► kernels::cuda::TriAttentionScores
//     ──► ZNormMaxPool ──► pooled scores [end - begin] ──D2H──► the policy's top-k on the host
//   Compact(table, plan)                                                  (every policy)
//     table + keep lists ──H2D──► kernels::cuda::CompactKv gathers K, V and scales in place
//   ScoreSnapKv(table, layer, kv_head, lo, n, window)                     (SnapKV)
//     the window's queries (RoPE applied on the host) ──H2D──► kernels::cuda::SnapKvScores
//     ──► one score per slot of [lo, n) ──D2H──► the policy's top-k on the host
//   ReadRows(table, layer, kv, head, [begin, end))                        (tests, other callers)
//     device runs ──cudaMemcpyAsync per block run──► host staging ──► kernels::cpu::DequantizeRows
//
// So keys never leave the device in a round: keep lists, weights and window queries go up, one
// score per candidate comes down. The raw scores and the compacted
// KV are bit-identical to the CPU backend's (same operations, no FMA; a gather of codes); the
// TriAttention's pooled scores differ from the CPU's by the order of the mean/variance sums (~1e-15
// relative); SnapKV's scores differ by the order of the softmax sums (~1e-13 relative).
// All work runs on the storage's stream, after the step's writes; each call synchronizes that
// stream before returning (the device scratch and the host results are reused).
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
  bool ScoreTriAttention(std::span<const int32_t> table, int layer, int kv_head, int64_t begin, int64_t end,
                         const compression::TriKeyWeights& weights, std::span<double> pooled) override;
  // Every head's kernels queued on the storage's stream, one copy of all pooled scores back and
  // one synchronisation per round.
  bool ScoresTriAttentionBatched() const override { return true; }
  bool ScoreTriAttentionAll(std::span<const int32_t> table, int64_t begin, int64_t end,
                            std::span<const compression::TriKeyWeights> weights, std::span<double> pooled) override;
  // Every KV head of a layer queued on the stream: one copy of all rows back, one
  // synchronisation per layer.
  bool ScoresSnapKvBatched() const override { return true; }
  bool ScoreSnapKvLayer(std::span<const int32_t> table, int layer, int64_t lo, int64_t n,
                        std::span<const compression::SnapKvWindow> windows, std::span<double> rows) override;
  bool ScoreSnapKv(std::span<const int32_t> table, int layer, int kv_head, int64_t lo, int64_t n,
                   const compression::SnapKvWindow& window, std::span<double> row) override;

  CudaKvAccess(const CudaKvAccess&) = delete;
  CudaKvAccess& operator=(const CudaKvAccess&) = delete;
  ~CudaKvAccess() override;

 private:
  // A grow-only device allocation.
  struct DeviceScratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  void* Ensure(DeviceScratch& s, size_t bytes);
  // The first num_blocks entries of table, copied (async, on stream) into d_table_.
  const int32_t* UploadTable(std::span<const int32_t> table, int64_t num_blocks, void* stream);

  CudaKvStorage& storage_;
  std::vector<std::byte> rows_;
  std::vector<float> row_scales_;
  std::vector<std::byte*> layer_ptrs_;   // [layers] data pointers, then the device copy below
  std::vector<float*> scale_ptrs_;
  DeviceScratch d_layers_;   // [layers] data pointers, [layers] scale pointers
  DeviceScratch d_table_;    // block table
  DeviceScratch d_keep_;     // keep lists
  DeviceScratch d_weights_;  // w then c
  DeviceScratch d_scores_;   // [group][n] then pooled [n]; SnapKV: its workspace then the row
  DeviceScratch d_window_;   // SnapKV: the window's queries, then seen counts
  std::vector<double> host_weights_;
  std::vector<float> host_queries_;
  std::vector<int64_t> host_seen_;  // ScoreSnapKvLayer: every head's window extents
};

}  // namespace kvserve::cuda
