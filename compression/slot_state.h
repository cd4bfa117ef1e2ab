// Per-sequence state that lives beside the sequence's KV and moves with it when a round
// compacts the cache. One SlotState per sequence (n > 1 samples: one each, copied at fork),
// created by CompressionPolicy::NewSlotState so it tracks exactly what the policy needs.
//
//   positions_: [num_layers][num_kv_heads][capacity_]  int32   absolute (RoPE) position of the
//                                                              token in physical slot i of the row
//   mass_:      [num_layers][num_kv_heads][capacity_]  float   H2O: attention mass accumulated
//                                                              by the token in slot i (optional)
//   queries:    per layer a ring of the last `query_window` pre-RoPE query rows
//               [window][num_q_heads * head_dim] and their positions     (SnapKV, optional)
//
//   row (layer, head):  slot 0 ............ size_-1 | size_ ...... capacity_-1
//                       [ live, ascending positions ] [ unused ]
//
// Invariants: size() equals the sequence's physical KV length (the runner appends exactly the
// slots a step wrote); inside a row positions strictly increase with the slot index (new
// tokens are appended, compaction keeps order), but rows may hold different positions after
// a per-head round. Positions differ from physical indices once a round has run, which is
// why they are tracked here rather than derived.
//
// Lifecycle: Append after each forward step that wrote KV; rounds move and shrink it through
// ApplyKeepPlan (CompressionPolicy::Run, after KvAccess::Compact moved the KV); a sequence
// whose KV is dropped (preemption by recompute) starts a fresh SlotState; a swapped-out
// sequence keeps its state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/kv_compact.h"

namespace kvserve::compression {
using KeepPlan = kernels::cpu::KeepPlan;
}

namespace kvserve::compression {

struct SlotStateOptions {
  int num_layers = 0;   // 0: track nothing (the `full` policy)
  int num_kv_heads = 0;
  bool track_mass = false;
  int query_window = 0;  // > 0: keep the last query_window pre-RoPE queries per layer
  int num_q_heads = 0;   // query rows' shape (query_window > 0 only)
  int head_dim = 0;
};

class SlotState {
 public:
  SlotState() = default;
  explicit SlotState(const SlotStateOptions& options);

  const SlotStateOptions& options() const { return options_; }
  bool tracks_slots() const { return options_.num_layers > 0; }
  bool tracks_mass() const { return options_.track_mass; }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }

  // Grows the per-slot arrays to hold `capacity` slots (allocates; call it once at admission
  // with the planned peak, B + beta + the largest chunk, so steps do not allocate).
  void Reserve(int64_t capacity);
  // Slots [size, size + count) get positions first_position + j in every row and zero mass.
  void Append(int64_t first_position, int64_t count);
  // After compaction: the first new_size slots stay live.
  void Shrink(int64_t new_size);

  std::span<const int32_t> positions(int layer, int head) const;
  std::span<const float> mass(int layer, int head) const;

  // mass(layer, head)[i] += add[i] for i in [0, len), len <= size().
  void AddMass(int layer, int head, const float* add, int64_t len);

  // Records this sequence's pre-RoPE query rows of one layer: q is [num_rows][q_stride], each
  // row starting with num_q_heads * head_dim floats; positions [num_rows]. Only the last
  // query_window rows are kept.
  void AddQueries(int layer, const float* q, int64_t q_stride, const int32_t* positions, int64_t num_rows);
  int num_queries(int layer) const;
  // Copies the kept queries of `layer`, oldest first, into out: [num_queries][q_size] and
  // their positions into pos_out. Returns num_queries(layer).
  int CopyQueries(int layer, float* out, int32_t* pos_out) const;

  // After the KV of a round was compacted by `plan` (KvAccess::Compact): moves positions and
  // mass the same way (host side, whatever memory the KV lives in) and shrinks to
  // plan.new_len(). plan.phys_len must equal size(); the plan must be valid (ValidateKeepPlan).
  void ApplyKeepPlan(const KeepPlan& plan);

 private:
  int64_t row(int layer, int head) const { return static_cast<int64_t>(layer) * options_.num_kv_heads + head; }
  int q_size() const { return options_.num_q_heads * options_.head_dim; }

  SlotStateOptions options_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  std::vector<int32_t> positions_;
  std::vector<float> mass_;
  std::vector<float> query_ring_;      // [num_layers][query_window][q_size]
  std::vector<int32_t> query_pos_;     // [num_layers][query_window]
  std::vector<int64_t> query_count_;   // [num_layers] rows ever added
};

}  // namespace kvserve::compression
