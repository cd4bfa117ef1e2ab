// How compression reaches a sequence's KV: through this interface, never through raw
// pointers into the pool, so the same policies run over host KV (HostKvAccess, the CPU
// reference) and over device KV (a backend reads the keys a round scores back to the host
// and applies the keep plan with its own gather).
//
//   round (CompressionPolicy::Run), one sequence:
//     ReadRows(table, layer, K, head, lo, n)  ──► host float rows the policy scores
//       (or ScoreTriAttention / ScoreSnapKv: a device backend scores in place; scores cross)
//     policy selects keep [layers][kv heads][K]          (host, float64)
//     Compact(table, plan)                    ──► K/V (+ scales) moved in the backend's memory
//     SlotState::ApplyKeepPlan(plan)          ──► positions / mass moved on the host
//
// Only keep lists and the keys of the scored rows cross between host and device. Not
// thread-safe; the runner's engine thread owns it and nothing else touches the KV during a
// round.
#pragma once

#include <cstdint>
#include <span>

#include "cache/kv_layout.h"
#include "kernels/cpu/kv_compact.h"

namespace kvserve::compression {

// A keep plan is plain data (kernels/cpu/kv_compact.h): which candidates every (layer, KV
// head) row keeps. Backends copy it to wherever their KV lives.
using KeepPlan = kernels::cpu::KeepPlan;
using CompactStats = kernels::cpu::CompactStats;

// TriAttention's scoring weights of one (layer, KV head) (TriAttentionScorer::PrepareKvHead):
// what a backend needs to score keys where they live.
struct TriKeyWeights {
  int group = 0;      // query heads of the KV head
  int pools = 1;      // 1 (mean over offsets) or the number of offsets (max pooling)
  bool trig = true;   // score terms
  bool norm = true;
  std::span<const double> w;  // [pools][group][head_dim] virtual queries
  std::span<const double> c;  // [group][head_dim / 2] norm weights
};

// SnapKV's observation window for one (layer, KV head): the window's queries (RoPE applied)
// and how many of the sequence's slots each of them saw (its causal prefix).
struct SnapKvWindow {
  int group = 0;               // query heads of the KV head
  int num_queries = 0;         // window rows
  const float* queries = nullptr;  // [num_queries][q_stride]; head h at h * head_dim
  int64_t q_stride = 0;
  std::span<const int64_t> seen;   // [num_queries] slots [0, seen[r]) attended by row r
  int64_t prefix_end = 0;      // [prefix_end, n): the window's own slots, always kept
  int pool_kernel = 1;         // average-pool width (odd)
  double scale = 1.0;          // softmax scale
};

class KvAccess {
 public:
  virtual ~KvAccess() = default;

  virtual const cache::KvLayout& layout() const = 0;

  // Dequantizes rows [begin, end) of (layer, kv: 0=K 1=V, head) of the sequence whose block
  // table is `table` (covering at least `end` slots) into host memory out: [end - begin][head_dim].
  virtual void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                        float* out) = 0;

  // Moves the sequence's K/V (and their scales) as `plan` says (kv_compact.h semantics).
  // Per-slot host state (positions, attention mass) is the caller's: SlotState::ApplyKeepPlan.
  // The plan has been checked with kernels::cpu::ValidateKeepPlan against this layout and table.
  virtual CompactStats Compact(std::span<const int32_t> table, const KeepPlan& plan) = 0;

  // Optional scoring where the KV lives (a device backend): the TriAttention scores of rows
  // [begin, end) of (layer, K, kv_head) under `weights`, z-normalised per query head and
  // max-pooled over the group, into pooled[end - begin] (what TriAttentionPolicy selects
  // from), so only these scores cross, not the keys. Returns false when the backend does not
  // score; the policy then reads the rows and scores on the host (the reference).
  // Optional, as ScoreTriAttention: SnapKV's score of every slot of [lo, n) of (layer, K,
  // kv_head) into row[n - lo]: for slots before window.prefix_end the window's attention
  // probabilities summed over its rows, average-pooled over pool_kernel slots (within
  // [0, prefix_end)) and averaged over the group; +inf for the window's own slots.
  virtual bool ScoreSnapKv(std::span<const int32_t> table, int layer, int kv_head, int64_t lo, int64_t n,
                           const SnapKvWindow& window, std::span<double> row) {
    (void)table, (void)layer, (void)kv_head, (void)lo, (void)n, (void)window, (void)row;
    return false;
  }

  // Batched ScoreSnapKv: every KV head of one layer in one call (windows[kv_head], each valid
  // for the call), rows: [num_kv_heads][n - lo], row k exactly what ScoreSnapKv(..., layer, k,
  // ...) would write. A device backend synchronises once per layer instead of once per head.
  // Offered up front (ScoresSnapKvBatched); false: the policy scores per head.
  virtual bool ScoresSnapKvBatched() const { return false; }
  virtual bool ScoreSnapKvLayer(std::span<const int32_t> table, int layer, int64_t lo, int64_t n,
                                std::span<const SnapKvWindow> windows, std::span<double> rows) {
    (void)table, (void)layer, (void)lo, (void)n, (void)windows, (void)rows;
    return false;
  }

  virtual bool ScoreTriAttention(std::span<const int32_t> table, int layer, int kv_head, int64_t begin, int64_t end,
                                 const TriKeyWeights& weights, std::span<double> pooled) {
    (void)table, (void)layer, (void)kv_head, (void)begin, (void)end, (void)weights, (void)pooled;
    return false;
  }

  // Batched ScoreTriAttention: every (layer, KV head) of a round in one call, so a device
  // backend queues all heads' work and synchronises once instead of once per head.
  // weights[layer * num_kv_heads + kv_head] (each valid for the call); pooled:
  // [layers * num_kv_heads][end - begin], row i exactly what ScoreTriAttention(..., layer,
  // kv_head, ...) would write. A backend that offers it says so up front
  // (ScoresTriAttentionBatched), so the policy prepares every head's weights only for it.
  virtual bool ScoresTriAttentionBatched() const { return false; }
  virtual bool ScoreTriAttentionAll(std::span<const int32_t> table, int64_t begin, int64_t end,
                                    std::span<const TriKeyWeights> weights, std::span<double> pooled) {
    (void)table, (void)begin, (void)end, (void)weights, (void)pooled;
    return false;
  }
};

}  // namespace kvserve::compression
