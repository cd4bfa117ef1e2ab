// KvCompressor: the model runner's side of per-request KV compression. It owns one policy
// instance and one SlotState per compressing sequence and runs rounds on the runner's KV
// storage right after a step's forward pass wrote the step's KV (compression_policy.h).
//
//   NewSeq (plan) ──► Track(seq, params)           policy + SlotState; resume: parked state
//   before forward ──► BeginStep(seq, ...)          slots appended for this step's writes
//   forward        ──► pre-RoPE queries / attention mass, when a policy needs them
//   after forward  ──► EndStep(seq, ...)            Due? ─► Run ─► table shrunk, Compaction
//   preempted      ──► Park (swap: KV comes back as it was) or Forget (recompute)
//
//   state per sequence:  policy (strategy object, from CreatePolicy)
//                        slots  [layer][kv head][slot] -> absolute position (+ H2O mass)
//                        parked (swapped out; kept until resumed or forgotten)
//
// Invariant: for a tracked sequence, slots.size() equals the physical KV length the runner's
// block table covers after each EndStep. Only the engine thread calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cache/cache_types.h"
#include "compression/compression_policy.h"
#include "compression/policy_params.h"
#include "compression/seq_kv_view.h"
#include "compression/slot_state.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

class KvCompressor {
 public:
  // `context` may be null: then only `full` sequences can be tracked (Track fails otherwise).
  // The KV arrays must outlive the compressor.
  KvCompressor(const compression::PolicyContext* context, const cache::KvLayout& layout,
               std::span<std::byte* const> layer_data, std::span<float* const> layer_scales);

  // A sequence the runner starts (or resumes). `full` is not tracked. With resume, the state
  // parked at preemption is reused (its KV comes back from the host tier unchanged).
  absl::Status Track(cache::SeqId seq, const compression::PolicyParams& params, bool auto_mode, bool resume);
  // Preempted: keep the state in case the sequence is swapped back in.
  void Park(cache::SeqId seq);
  void Forget(cache::SeqId seq);
  bool tracking(cache::SeqId seq) const { return states_.contains(seq.value()); }
  compression::ObserverNeeds needs(cache::SeqId seq) const;

  // Before the forward pass: the step writes num_tokens slots at [kv_len_after - num_tokens,
  // kv_len_after) for positions first_position + j. Slots before that which the state has not
  // seen (a prefix-cache hit, a fork's shared prompt) hold positions 0.. in order.
  void BeginStep(cache::SeqId seq, int64_t first_position, int32_t num_tokens, int64_t kv_len_after);
  // This sequence's pre-RoPE query rows of one layer (only if needs().pre_rope_queries).
  void ObserveQueries(cache::SeqId seq, int layer, const float* q, int64_t q_stride, const int32_t* positions,
                      int64_t num_rows);
  void ObserveAttentionMass(cache::SeqId seq, const compression::MassView& mass);
  // After the forward pass: runs a round when one is due (auto sequences only under
  // `pressure`). On compaction shrinks `table` to the blocks still used, appends a
  // Compaction to `out` and returns true.
  absl::StatusOr<bool> EndStep(cache::SeqId seq, int64_t next_position, bool pressure, std::vector<int32_t>& table,
                               std::vector<scheduler::Compaction>& out);

 private:
  struct State {
    std::unique_ptr<compression::CompressionPolicy> policy;
    compression::SlotState slots;
    bool auto_mode = false;
  };
  State* find(cache::SeqId seq);

  const compression::PolicyContext* context_;
  cache::KvLayout layout_;
  std::span<std::byte* const> layer_data_;
  std::span<float* const> layer_scales_;
  absl::flat_hash_map<int64_t, State> states_;
  absl::flat_hash_map<int64_t, State> parked_;
};

}  // namespace kvserve::engine
