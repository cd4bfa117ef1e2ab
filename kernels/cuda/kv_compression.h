// Compression on the device: the twins of the CPU code a compression round runs over a
// sequence's KV (compression/ and kernels/cpu/kv_compact.h), so that only keep lists and one
// pooled score per candidate slot cross to the host, never the keys. Plain C++ header: device
// pointers, the stream as void*.
//
//   TriAttentionScores   raw TriAttention scores of rows [begin, end) of one (layer, KV head):
//                        virtual-query dot products (max over the offset pools) + norm term,
//                        per query head of the group; float64, the same operations in the same
//                        order as compression::TriAttentionScorer::ScoreKeys (no FMA), so the
//                        raw scores are bit-identical to the CPU's for equal keys.
//   ZNormMaxPool         per query head z-normalisation (compression::ZNormalize), then the
//                        max over the group (MaxInto): one pooled score per slot. The mean and
//                        variance are tree-reduced (not the CPU's sequential sums), so pooled
//                        scores agree to ~1e-15 relative; equal raw scores stay equal.
//   SnapKvScores         SnapKV's observation-window attention scores (avg-pooled, group mean)
//   CompactKv            compaction gather of one sequence by a keep plan
//                        (kernels::cpu::CompactKv semantics, K, V and scales): bit-exact.
//
// All functions return 0 or a cudaError_t value; shapes outside the limits return
// cudaErrorInvalidValue without launching.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"

namespace kvserve::kernels::cuda {

// The scorer's per-(layer, KV head) weights (TriAttentionScorer::PrepareKvHead), on the device.
struct DeviceTriWeights {
  int group = 0;        // query heads per KV head
  int pools = 1;        // P: 1 (mean pooling) or the number of offsets (max pooling)
  bool trig = true;     // score terms
  bool norm = true;
  const double* w = nullptr;  // [P][group][head_dim] virtual queries (1/s folded in)
  const double* c = nullptr;  // [group][head_dim / 2] norm weights
};

// scores: [group][end - begin] doubles. table: the sequence's block ids (device), covering end.
int TriAttentionScores(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                       const int32_t* table, int kv_head, int64_t begin, int64_t end, const DeviceTriWeights& weights,
                       double* scores, void* stream);

// scores: [group][n] (modified in place: z-normalised); pooled: [n]. min_std: compression::kMinStd.
int ZNormMaxPool(double* scores, int group, int64_t n, double min_std, double* pooled, void* stream);

// SnapKV's window scores of (layer, KV head) over slots [lo, n) into row[n - lo]
// (compression::KvAccess::ScoreSnapKv semantics). queries: device [num_queries][q_stride]
// floats, the KV head's first query head at offset 0; seen: device [num_queries]. float64
// dot products as the CPU policy; the softmax sums are tree-reduced, so scores agree with the
// CPU's to ~1e-13 relative. workspace: SnapKvWorkspaceBytes(group, num_queries, prefix_end).
struct DeviceSnapKvWindow {
  int group = 0;
  int num_queries = 0;
  const float* queries = nullptr;
  int64_t q_stride = 0;
  const int64_t* seen = nullptr;
  int64_t prefix_end = 0;
  int pool_kernel = 1;
  double scale = 1.0;
};
size_t SnapKvWorkspaceBytes(int group, int num_queries, int64_t prefix_end);
int SnapKvScores(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                 const int32_t* table, int kv_head, int64_t lo, int64_t n, const DeviceSnapKvWindow& window,
                 void* workspace, double* row, void* stream);

// layer_data / layer_scales: DEVICE arrays of [num_layers] device pointers (scales may be null
// for unscaled dtypes); table: device block ids covering phys_len; keep: device
// [num_layers][num_kv_heads][num_keep], each row strictly ascending in [lo, scored_end)
// (kernels::cpu::ValidateKeepPlan, checked by the caller).
int CompactKv(const cache::KvLayout& layout, std::byte* const* layer_data, float* const* layer_scales,
              const int32_t* table, int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep,
              const int32_t* keep, void* stream);

}  // namespace kvserve::kernels::cuda
