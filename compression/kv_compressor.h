// KvCompressor: the model runner's side of per-request KV compression. It owns one policy
// instance and one SlotState per compressing sequence and runs rounds on the runner's KV
// storage right after a step's forward pass wrote the step's KV (compression_policy.h).
// Used by the serving runner (engine/cpu_model_runner) and the quality evaluation
// (compression/quality_eval), so both compress exactly the same way.
//
//   NewSeq ──► Track(seq, params)                 policy + SlotState; resume: parked state
//   before forward ──► BeginStep(seq, ...)        slots appended for this step's writes
//                  ──► PrepareObservers(batch)    side outputs, only if a policy reads them
//   forward (pre-RoPE queries routed to policies as they are produced)
//   after forward  ──► FinishObservers()          attention mass handed to policies
//                  ──► EndStep(seq, ...)          Due? ─► Run ─► table shrunk, RoundResult
//   preempted      ──► Park (swap: KV comes back as it was) or Forget (recompute)
//
//   state per sequence:  policy (strategy object, from CreatePolicy)
//                        slots  [layer][kv head][slot] -> absolute position (+ H2O mass)
//                        parked (swapped out; kept until resumed or forgotten)
//
// Invariant: for a tracked sequence, slots.size() equals the physical KV length its block
// table covers after each EndStep. Only one thread (the engine's) calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cache/cache_types.h"
#include "cache/kv_layout.h"
#include "compression/compression_policy.h"
#include "compression/policy_params.h"
#include "compression/slot_state.h"
#include "model/forward_batch.h"

namespace kvserve::compression {

// One sequence of a forward batch: rows [row_begin, row_begin + num_rows) of the batch,
// KV length kv_len after the step's writes.
struct BatchSeq {
  cache::SeqId seq;
  int32_t row_begin = 0;
  int32_t num_rows = 0;
  int64_t kv_len = 0;
};

class KvCompressor {
 public:
  // `context` may be null: then only `full` sequences can be tracked (Track fails otherwise).
  // The KV arrays must outlive the compressor.
  KvCompressor(const PolicyContext* context, const cache::KvLayout& layout, std::span<std::byte* const> layer_data,
               std::span<float* const> layer_scales);

  // A sequence the runner starts (or resumes). `full` is not tracked. With resume, the state
  // parked at preemption is reused (its KV comes back from the host tier unchanged).
  absl::Status Track(cache::SeqId seq, const PolicyParams& params, bool auto_mode, bool resume);
  // Preempted: keep the state in case the sequence is swapped back in.
  void Park(cache::SeqId seq);
  void Forget(cache::SeqId seq);
  bool tracking(cache::SeqId seq) const { return states_.contains(seq.value()); }

  // Before the forward pass: the step writes num_tokens slots at [kv_len_after - num_tokens,
  // kv_len_after) for positions first_position + j. Slots before that which the state has not
  // seen (a prefix-cache hit, a fork's shared prompt) hold positions 0.. in order.
  void BeginStep(cache::SeqId seq, int64_t first_position, int32_t num_tokens, int64_t kv_len_after);

  // Side outputs for the sequences of `batch` whose policies read them; null when none does
  // (the forward pass then costs nothing extra). `positions` are the batch's row positions.
  // The spans must stay valid until FinishObservers.
  const model::ForwardObservers* PrepareObservers(std::span<const BatchSeq> batch, std::span<const int32_t> positions);
  // After the forward pass: hands the attention mass to the policies that track it.
  void FinishObservers();

  // After the forward pass: runs a round when one is due (auto sequences only under
  // `pressure`). On compaction shrinks `table` to the blocks still used and returns the
  // round; nullopt when nothing ran or nothing was evicted.
  absl::StatusOr<std::optional<RoundResult>> EndStep(cache::SeqId seq, int64_t next_position, bool pressure,
                                                     std::vector<int32_t>& table);

 private:
  struct State {
    std::unique_ptr<CompressionPolicy> policy;
    SlotState slots;
    bool auto_mode = false;
  };
  State* find(cache::SeqId seq);

  const PolicyContext* context_;
  cache::KvLayout layout_;
  std::span<std::byte* const> layer_data_;
  std::span<float* const> layer_scales_;
  absl::flat_hash_map<int64_t, State> states_;
  absl::flat_hash_map<int64_t, State> parked_;

  // Per-batch observer wiring (PrepareObservers .. FinishObservers).
  model::ForwardObservers observers_;
  std::span<const BatchSeq> batch_;
  std::span<const int32_t> positions_;
  std::vector<std::pair<int, State*>> observing_;  // (batch index, state)
  std::vector<float> mass_;
  int64_t mass_stride_ = 0;
};

}  // namespace kvserve::compression
