// KvCompressor: the model runner's side of per-request KV compression. It owns one policy
// instance and one SlotState per compressing sequence and runs rounds on the runner's KV
// storage right after a step's forward pass wrote the step's KV (compression_policy.h).
// Used by the serving runner (engine/cpu_model_runner) and the quality evaluation
// (compression/quality_eval), so both compress exactly the same way.
//
//   NewSeq ──► Track(seq, params)                 policy + SlotState; resume: parked state
//   before forward ──► BeginStep(seq, ...)        slots appended for this step's writes
//                  ──► PrepareObservers(batch)    side outputs, only if a policy reads them
//   forward (fills the compressor-owned side-output buffers: pre-RoPE queries, mass)
//   after forward  ──► DropRejected(seq, n)       speculative decoding: rejected guesses' slots
//                  ──► FinishObservers()          queries and mass handed to the policies,
//                                                 once per step for all layers
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

#include <array>
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
#include "compression/demotion_round.h"
#include "compression/kv_access.h"
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
  // `kv` (the runner's storage, host or device) must outlive the compressor. `tiers`: the
  // demotion tier pools (host memory), tier t + 1 at index t; empty when the server has none.
  KvCompressor(const PolicyContext* context, KvAccess& kv,
               std::span<const kernels::cpu::KvTierStorage> tiers = {});

  // A sequence the runner starts (or resumes). `full` is not tracked. With resume, the state
  // parked at preemption is reused (its KV comes back from the host tier unchanged).
  absl::Status Track(cache::SeqId seq, const PolicyParams& params, bool auto_mode, bool resume);
  // Preempted: keep the state in case the sequence is swapped back in.
  void Park(cache::SeqId seq);
  void Forget(cache::SeqId seq);
  bool tracking(cache::SeqId seq) const { return states_.contains(seq.value()); }
  // The tracked state of a sequence (positions, observed queries and mass); null if untracked.
  const SlotState* slot_state(cache::SeqId seq) const {
    auto it = states_.find(seq.value());
    return it == states_.end() ? nullptr : &it->second.slots;
  }

  // Before the forward pass: the step writes num_tokens slots at [kv_len_after - num_tokens,
  // kv_len_after) for positions first_position + j. Slots before that which the state has not
  // seen (a prefix-cache hit, a fork's shared prompt) hold positions 0.. in order.
  void BeginStep(cache::SeqId seq, int64_t first_position, int32_t num_tokens,
                 int64_t kv_len_after);

  // Side outputs for the sequences of `batch` whose policies read them; null when none does
  // (the forward pass then costs nothing extra). The buffers are the compressor's, sized for
  // the batch (grown, never shrunk). `positions` are the batch's row positions. The spans
  // must stay valid until FinishObservers.
  const model::ForwardObservers* PrepareObservers(std::span<const BatchSeq> batch,
                                                  std::span<const int32_t> positions);
  // Speculative decoding, after the forward pass and the verification: the step's last
  // `num_rejected` slots held rejected guesses. They leave the slot state, and their query rows
  // are not observed (call it before FinishObservers). The scheduler never drafts for a policy
  // that reads attention mass (DraftRoom): mass arrives summed over the step's rows.
  void DropRejected(cache::SeqId seq, int32_t num_rejected);
  // After the forward pass (and DropRejected): hands each observing sequence its slice of the
  // step's queries and attention mass (one call per policy input, all layers at once).
  void FinishObservers();

  // After the forward pass: runs a round when one is due (auto sequences only under
  // `pressure`). On compaction shrinks `table` to the blocks still used and returns the
  // round; nullopt when nothing ran or nothing was evicted. tier_tables[t]: the blocks of
  // demotion tier t + 1 granted to the sequence (may be fewer than the tiers; a sequence
  // asking for demotion demotes once some are granted, and only evicts before).
  absl::StatusOr<std::optional<RoundResult>> EndStep(
      cache::SeqId seq, int64_t next_position, bool pressure, std::vector<int32_t>& table,
      std::span<const std::vector<int32_t>> tier_tables = {});
  // Tokens the sequence holds in demotion tier tier + 1 (0 when untracked): the first
  // tokens / block_size blocks of its tier table are in use (attention reads them).
  int64_t tier_tokens(cache::SeqId seq, int tier) const {
    auto it = states_.find(seq.value());
    return it == states_.end() ? 0 : it->second.tiers[static_cast<size_t>(tier)].size;
  }
  int num_tiers() const { return static_cast<int>(tier_storages_.size()); }
  // The sequence's tier state (positions of its demoted tokens); null if untracked.
  const TierSlots* tier_slots(cache::SeqId seq, int tier) const {
    auto it = states_.find(seq.value());
    return it == states_.end() ? nullptr : &it->second.tiers[static_cast<size_t>(tier)];
  }

 private:
  struct State {
    std::unique_ptr<CompressionPolicy> policy;
    SlotState slots;
    std::array<TierSlots, kMaxDemoteTiers> tiers;  // demotion tiers (demotion_round.h)
    bool auto_mode = false;
  };
  State* find(cache::SeqId seq);

  const PolicyContext* context_;
  KvAccess& kv_;
  cache::KvLayout layout_;
  std::vector<kernels::cpu::KvTierStorage> tier_storages_;
  absl::flat_hash_map<int64_t, State> states_;
  absl::flat_hash_map<int64_t, State> parked_;

  // Per-batch observer wiring (PrepareObservers .. FinishObservers).
  model::ForwardObservers observers_;
  std::span<const BatchSeq> batch_;
  std::span<const int32_t> positions_;
  struct Observing {
    int index = 0;  // in batch_
    State* state = nullptr;
    int32_t rejected = 0;  // trailing rows not observed (DropRejected)
  };
  std::vector<Observing> observing_;
  std::vector<float> mass_;  // [num_layers][num_seqs][num_kv_heads][mass_stride_]
  int64_t mass_stride_ = 0;
  std::vector<float> queries_;  // [num_layers][num_tokens][q_size]
  int64_t query_rows_ = 0;      // num_tokens of the batch when queries are observed, else 0
};

}  // namespace kvserve::compression
