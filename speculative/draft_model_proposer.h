// DraftModelProposer: draft-model speculation (method draft). A smaller model that shares the
// target's tokenizer guesses the next k tokens greedily; the target verifies them in one
// forward pass (engine/draft_verifier.h), so the guesses only decide speed, never output.
//
// The draft has its own KV pool and its own block tables (a KvCacheManager over a host pool
// of speculative.draft_kv_bytes), apart from the target's. The engine factory carves that
// pool out of cache.kv_bytes, so the target's admission is sized with it counted; a draft
// never takes a target block, and running out of its own is a normal answer (no guesses this
// step; the sequence decodes one token as usual).
//
// Per sequence it remembers the tokens its KV holds (`fed`). A Propose call:
//   1. keeps the longest prefix of `fed` that still matches the sequence's verified tokens
//      (at most all but the last token, whose logits start the draft) and truncates the KV
//      to it: guesses the target rejected leave here, lazily, at the next draft;
//   2. feeds the rest of the verified tokens in one forward pass (a new sequence's whole
//      prompt, chunked by the model's row limit; usually the one or two tokens the last step
//      emitted), taking the last row's logits;
//   3. runs k - 1 one-row decode steps, each feeding the previous guess.
// Guesses are argmax (greedy): the draft is a point mass, so the verifier's rejection
// sampling (q = onehot(g)) stays exact for sampled requests too.
//
//   fed:    [ p0 p1 ... pn | t1 t2 | g1 g2 g3 ]   KV of the last draft (g4 was never fed)
//   tokens: [ p0 p1 ... pn | t1 t2 | g1 x  ]      target accepted g1, then emitted x
//   keep:   [ p0 ... t2 g1 ]  truncate, feed [x] (logits -> g1'), then g1' .. g3' one by one
//
// Compressing sequences (the request's kv_compression, DraftKv): the draft's KV is held to
// the same policy and budget as the target's, by a KvCompressor of its own over the draft
// pool (the draft model's shape and TriAttention statistics, <draft>/triattention_stats.bin).
// Only verified tokens enter its slot state: step 1 drops every guess slot (accepted ones
// too), step 2 feeds the verified tokens since the last draft with the policy observing
// their rows, and a round runs after each such forward when one is due (as the target's
// after its steps; `auto` only under the engine's pressure); the guesses of step 3 sit past
// the slot state until the next draft.
//
//   slots:  [ compacted verified KV (SlotState: positions) | guess slots (temporary) ]
//            ^ rounds only ever see this part                 ^ truncated at the next draft
//
// A policy the draft cannot run (triattention without draft statistics; h2o never drafts)
// gives that sequence no guesses rather than an uncompressed draft KV. Demotion has no tier
// pools here: the draft's rounds only evict.
//
// Release (finished, aborted, preempted) frees the sequence's draft KV and its compression
// state. Not thread-safe: the scheduler's (engine) thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/logger.h"
#include "cache/host_kv_cache.h"
#include "compression/compression_policy.h"
#include "compression/host_kv_access.h"
#include "compression/kv_compressor.h"
#include "compression/triattention_stats.h"
#include "model/batch_builder.h"
#include "model/llama_model.h"
#include "speculative/draft_proposer.h"
#include "speculative/step_cost.h"

namespace kvserve::speculative {

struct DraftModelOptions {
  int block_size = 16;
  uint64_t kv_bytes = 32ull << 20;  // the draft's own KV pool (fp32)
  int threads = 1;                  // the draft model's compute team
  int max_tokens_per_step = 512;    // rows per draft forward; longer catch-ups are chunked
  int64_t max_context = 0;          // model.max_model_len (0: the draft model's own)
  // guess_cost(): one draft forward relative to one target decode step. Decode streams the
  // weights, so the factory sets the ratio of active parameters (draft / target).
  double guess_cost = 0.0;
  // Round timings of the draft's own compression; must outlive the proposer. Required.
  const base::Clock* clock = nullptr;
};

class DraftModelProposer final : public DraftProposer {
 public:
  // Loads the draft model from `model_dir` and allocates its KV pool. The tokenizer check is
  // the caller's (CheckDraftCompatible): this only needs the vocabulary size to match.
  // <model_dir>/triattention_stats.bin, when present, must match the draft model.
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> Load(const std::string& model_dir,
                                                                  int32_t target_vocab_size,
                                                                  const DraftModelOptions& options,
                                                                  base::Logger logger);
  // Over an already built model (tests, benchmarks); `stats` may be null (no triattention).
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> Create(
      std::unique_ptr<model::LlamaModel> model, const DraftModelOptions& options,
      base::Logger logger, std::unique_ptr<compression::TriAttentionStats> stats = nullptr);
  ~DraftModelProposer() override;

  // One sequence: ProposeBatch of one task.
  void Propose(int64_t seq, std::span<const int32_t> tokens, const SpecParams& params,
               const DraftKv& kv, int max_tokens, std::vector<int32_t>& out) override;
  // A step's sequences together: their catch-ups share forward passes (up to the model's row
  // limit; a longer catch-up runs alone, chunked), and so does each of the k - 1 guess steps
  // (one row per sequence still guessing). Each sequence's guesses are what Propose alone
  // gives: the CPU forward pass is batch-invariant.
  bool batches() const override { return true; }
  void ProposeBatch(std::span<const DraftTask> tasks, std::vector<int32_t>& guesses,
                    std::vector<int32_t>& offsets) override;
  void Release(int64_t seq) override;
  double guess_cost() const override { return options_.guess_cost; }
  // The factory's measured figure (StepCost::guess_cost) replaces the parameter ratio.
  void set_guess_cost(double g) { options_.guess_cost = g; }
  // The draft model's own step cost, timed on a scratch pool (StepCost).
  absl::StatusOr<StepCost> MeasureStepCost(const base::Clock& clock) const {
    return speculative::MeasureStepCost(*model_, clock);
  }

  // Introspection (leak checks, metrics): blocks of the draft pool in use, sequences known.
  int32_t blocks_in_use() const;
  int32_t num_sequences() const { return static_cast<int32_t>(seqs_.size()); }
  // Compression rounds run on the draft pool, and the most blocks it ever held at once.
  int64_t rounds() const { return rounds_; }
  int32_t peak_blocks_in_use() const { return peak_blocks_; }
  const model::ModelConfig& model_config() const { return model_->config(); }

 private:
  struct Seq {
    std::vector<int32_t> fed;  // tokens of positions [0, fed.size()) in its KV, guesses last
    bool compressing = false;  // its KvCompressor state holds the verified tokens' slots
    bool refused = false;      // a policy the draft cannot run: no guesses for it
    int64_t verified = 0;      // compressing: fed tokens that were verified (no guesses)
  };
  DraftModelProposer(std::unique_ptr<model::LlamaModel> model, cache::HostKvCache kv,
                     std::unique_ptr<compression::TriAttentionStats> stats,
                     const DraftModelOptions& options, base::Logger logger);
  // One sequence of a ProposeBatch call.
  struct Work {
    size_t task = 0;  // its index in the tasks
    int64_t seq = 0;
    int max_tokens = 0;  // guesses wanted (1 when there is no room for the fed ones)
    size_t keep = 0;     // verified tokens its KV keeps: the catch-up starts there
    int64_t kv_len = 0;  // KV slots before the catch-up, then after it (and its round)
    int32_t count = 0;   // guesses so far, in guess_buf_[index * max_k_ ...]
    int32_t logits_row = 0;
    bool ok = true;
  };
  // Step 1 for one task: its state, tracking and truncation. False: no guesses for it.
  bool Prepare(const DraftTask& t, Work& w);
  // Step 2: the catch-ups of `group` in one forward pass (each within the row limit).
  void CatchUpTogether(std::span<Work> group, std::span<const DraftTask> tasks);
  // Step 2 for a catch-up longer than one forward's rows: alone, chunked.
  void CatchUpChunked(Work& w, const DraftTask& t);
  // After a sequence's catch-up forward: fed tokens, its round, its first guess.
  bool AfterCatchUp(Work& w, const DraftTask& t, size_t index, bool last_chunk);
  // Step 3: the k - 1 guess steps of every sequence still guessing, one row each per forward.
  void GuessTogether();
  // The forward pass over builder_'s batch, logits of `num_logits` rows into logits_, the
  // compressor observing observed_ (whose BeginSteps are done).
  absl::Status RunBatch(int num_logits);
  int32_t ArgmaxRow(int32_t row) const;
  std::span<const int32_t> TableOf(int64_t seq);
  // Compressing: starts tracking (false: the policy cannot run here, the sequence is refused).
  bool Track(int64_t seq, Seq& s, const DraftKv& kv);
  // Step 2 for a compressing sequence: a round after the forward when one is due.
  bool RoundAfterCatchUp(int64_t seq, int64_t next_position, bool pressure);
  void NotePeak();

  std::unique_ptr<model::LlamaModel> model_;
  cache::HostKvCache kv_;
  DraftModelOptions options_;
  base::Logger logger_;
  model::BatchBuilder builder_;
  std::vector<std::byte*> layer_data_;
  std::vector<float*> layer_scales_;
  std::vector<float> logits_;  // [rows with logits][vocab]
  std::vector<int32_t> table_scratch_;
  // ProposeBatch scratch, reused.
  std::vector<Work> works_;
  std::vector<int32_t> guess_buf_;  // [work][max_k_]
  int max_k_ = 0;
  std::vector<compression::BatchSeq> observed_;
  std::vector<int32_t> offsets_scratch_;
  std::vector<int32_t> counts_scratch_;  // guesses per task
  std::unique_ptr<compression::TriAttentionStats> stats_;
  compression::PolicyContext policy_context_;
  std::unique_ptr<compression::HostKvAccess> kv_access_;
  std::unique_ptr<compression::KvCompressor> compressor_;
  int64_t rounds_ = 0;
  int32_t peak_blocks_ = 0;
  absl::flat_hash_map<int64_t, Seq> seqs_;
};

}  // namespace kvserve::speculative
