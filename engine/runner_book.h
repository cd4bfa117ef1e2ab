// RunnerBook: the per-sequence bookkeeping every model runner (engine::CpuModelRunner,
// cuda::CudaModelRunner) does around its forward pass, in one place so the backends cannot
// drift apart. The runner owns the book, the KV storages and the compressor; the book owns the
// runner-side state of each sequence:
//
//   Seq { block table, history (prompt then generated), sampling params, seed,
//         grammar + automaton state after the generated tokens (structured outputs) }
//
//   StepPlan ──ApplyCopies──► swap out/in, copy-on-write on the runner's storages
//            ──Begin────────► new_seqs registered (grammar replayed on resume, compressor Track),
//                             tables patched, rows added to the BatchBuilder,
//                             compressor BeginStep; sampling_seqs() / batch_seqs() for this step
//            (runner: forward pass and sampling; AllowedFor gives a row's grammar mask,
//             Record appends the sampled token and advances the grammar)
//            ──Finish───────► compression rounds (StepResult::compactions), finished and
//                             preempted sequences dropped (parked ones keep their policy state)
//
// Single-threaded (the engine thread), as the runners.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cache/kv_storage.h"
#include "compression/kv_compressor.h"
#include "model/batch_builder.h"
#include "model/sampler.h"
#include "scheduler/step_plan.h"

namespace kvserve::structured {
class CompiledGrammar;
}

namespace kvserve::engine {

// Swap-outs, swap-ins (both directions through the same two storage calls whatever the memory
// spaces) and copy-on-write copies of `plan`, queued on `storage`. `swap` may be null when the
// plan moves nothing to or from the host tier.
absl::Status ApplyCopies(const scheduler::StepPlan& plan, cache::KvStorage& storage,
                         cache::KvStorage* swap);

class RunnerBook {
 public:
  struct Seq {
    std::vector<int32_t> table;
    std::vector<int32_t> history;  // prompt then generated
    int32_t num_prompt = 0;
    model::SamplingParams sampling;
    uint64_t seed = 0;
    int sample_index = 0;
    int prompt_logprobs = -1;  // scheduler::SamplingParams::prompt_logprobs
    scheduler::Pooling embed = scheduler::Pooling::kNone;
    // Structured outputs: the grammar and its automaton state after the generated tokens.
    std::shared_ptr<const structured::CompiledGrammar> grammar;
    int32_t grammar_state = 0;
    // Demotion tier tables (tier t + 1 at index t): blocks granted in the tier pools.
    std::vector<std::vector<int32_t>> tier_tables;
    // The table attention reads when the sequence holds demoted tokens: the filled blocks of
    // each tier (TieredBlock entries) in front of `table`.
    std::vector<int32_t> attn_table;
    // Layer groups: one window table per group (indexed by position; see step_plan.h).
    std::vector<std::vector<int32_t>> window;

    std::span<const int32_t> prompt() const {
      return {history.data(), static_cast<size_t>(num_prompt)};
    }
    std::span<const int32_t> output() const {
      return {history.data() + num_prompt, history.size() - static_cast<size_t>(num_prompt)};
    }
  };

  // `compressor` must outlive the book. `window_groups`: window tables per sequence (layer
  // groups, cache/layer_groups.h), 0 without.
  RunnerBook(int block_size, compression::KvCompressor& compressor, int window_groups = 0);

  // Registers the plan's new sequences and builds the step's batch (see the picture above).
  // InternalError when the plan names a sequence the runner never received.
  absl::Status Begin(const scheduler::StepPlan& plan);

  model::BatchBuilder& builder() { return builder_; }
  // The sequences sampled this step, in the order of plan.seqs with q.sample set (= logits rows).
  std::span<Seq* const> sampling_seqs() const { return sampling_seqs_; }
  std::span<const compression::BatchSeq> batch_seqs() const { return batch_seqs_; }
  // prompt_logprobs or mean-pooled embeddings: plan.seqs[i] feeds prompt tokens whose
  // successors are prompt tokens, so all its rows have logits (num_tokens of them; the last is also
  // the sampling row when q.sample). Only such sequences: other requests pay nothing.
  bool scores_prompt(size_t i) const { return scores_prompt_[i] != 0; }
  // The logits rows of plan.seqs[i]: num_tokens when scores_prompt, 1 + num_draft when
  // sampling, else 0.
  int32_t logits_rows(size_t i) const { return logits_rows_[i]; }
  Seq& plan_seq(size_t i) const { return *plan_seqs_[i]; }

  // The grammar's allowed-token mask for the sequence's next token; empty when unconstrained
  // (or the automaton is dead, which a correctly masked sampler never reaches).
  static std::span<const uint64_t> AllowedFor(const Seq& s);
  // Appends a sampled token to the history and advances the grammar.
  static void Record(Seq& s, int32_t token);
  // The masks of a drafting sequence's 1 + k rows, for a runner that samples every row before
  // verifying any (the CUDA runner's device greedy): row j's is the grammar state's after the
  // first j guesses, which is the state Record() will have reached by then exactly when those
  // guesses are accepted; rows after a rejection are discarded. out[0..k] is filled (k =
  // draft.size(), out.size() >= k + 1); an entry is empty when unconstrained (no grammar, or a
  // dead state after a guess the grammar refuses, whose row is never read). The sequence's own
  // state does not move.
  static void DraftMasks(const Seq& s, std::span<const int32_t> draft,
                         std::span<std::span<const uint64_t>> out);
  // Speculative decoding, after plan.seqs[i]'s verification: its last num_rejected slots held
  // rejected guesses. They leave the block table (the scheduler rolls its tables back the same
  // way) and the compressor's slot state, and the step's compression round (Finish) sees the
  // verified slots and positions only. Call it before the compressor's FinishObservers.
  void RejectGuesses(size_t i, const scheduler::ScheduledSeq& q, int32_t num_rejected);

  // Compression rounds of the step's sequences, then the finished / preempted ones dropped.
  absl::Status Finish(const scheduler::StepPlan& plan, scheduler::StepResult& result);

 private:
  compression::KvCompressor& compressor_;
  int block_size_;
  int window_groups_;
  absl::flat_hash_map<int64_t, Seq> seqs_;
  model::BatchBuilder builder_;
  std::vector<Seq*> sampling_seqs_;
  std::vector<Seq*> plan_seqs_;         // per plan.seqs entry
  std::vector<uint8_t> scores_prompt_;  // per plan.seqs entry
  std::vector<int32_t> logits_rows_;    // per plan.seqs entry
  std::vector<int32_t> rejected_;       // per plan.seqs entry: rejected guesses (RejectGuesses)
  std::vector<compression::BatchSeq> batch_seqs_;
};

}  // namespace kvserve::engine
