// DraftProposer: the strategy that guesses a sequence's next tokens (speculative decoding).
// The scheduler asks it once per decode step of a speculating sequence; the model runner then
// verifies the guesses against the target model in one forward pass (docs/speculative.md).
//
// Proposers see the sequence's tokens (prompt then generated, all verified): a draft is a
// guess, never state the target reads, so a wrong one costs compute but no correctness. A
// proposer may keep per-sequence state of its own (the draft model's KV: DraftModelProposer),
// keyed by the sequence id; the scheduler calls Release when a sequence stops holding KV
// (finished, aborted, preempted), and state never outlives that.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compression/policy_params.h"
#include "speculative/spec_params.h"

namespace kvserve::speculative {

// The sequence's KV compression as the engine resolved it, for a proposer that holds KV of
// its own (the draft model), which keeps that KV to the request's policy too. Stateless
// proposers ignore it.
struct DraftKv {
  compression::PolicyParams params;  // kind full: the request keeps every token
  bool auto_mode = false;            // `auto`: rounds only while `pressure`
  bool pressure = false;             // the engine's KV pool is above its auto watermark
};

// One sequence to draft for in a batch (DraftProposer::ProposeBatch).
struct DraftTask {
  int64_t seq = 0;
  std::span<const int32_t> tokens;  // prompt then generated, all verified
  const SpecParams* params = nullptr;
  DraftKv kv;
  int max_tokens = 0;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // True: the proposer drafts all of a step's sequences in one ProposeBatch call, which the
  // scheduler makes before it packs the step (a draft model shares its forward passes across
  // them); false: the scheduler calls Propose per sequence as it packs.
  virtual bool batches() const { return false; }
  // Guesses for every task at once: task i's are guesses[offsets[i], offsets[i + 1]) (both
  // cleared first). The default asks Propose once per task.
  virtual void ProposeBatch(std::span<const DraftTask> tasks, std::vector<int32_t>& guesses,
                            std::vector<int32_t>& offsets);
  // Appends at most `max_tokens` guesses that continue `tokens` (sequence `seq`) to `out`
  // (cleared first). Zero guesses is a normal answer (no idea, or no room: the sequence
  // decodes one token as usual). `kv`: the sequence's KV compression.
  virtual void Propose(int64_t seq, std::span<const int32_t> tokens, const SpecParams& params,
                       const DraftKv& kv, int max_tokens, std::vector<int32_t>& out) = 0;
  // Sequence `seq` is finished, aborted or preempted: drop what is kept for it. Unknown ids
  // are a no-op. Stateless proposers ignore it.
  virtual void Release(int64_t seq) { (void)seq; }
  // What proposing one guess costs, in units of one target decode step (streaming the target's
  // weights once): the draft model's forward pass for a draft model, ~0 for a lookup. The
  // adaptive draft length charges it to every guess (DraftLength).
  virtual double guess_cost() const { return 0.0; }
};

// One proposer per method, built once (the scheduler's strategy table).
// The draft-model proposer is built outside (it loads a model) and only referred to here.
class ProposerSet {
 public:
  // `draft` (may be null: method draft proposes nothing) must outlive the set.
  explicit ProposerSet(DraftProposer* draft = nullptr);
  ~ProposerSet();
  // Null for kNone, and for kDraft without a draft model.
  DraftProposer* For(config::SpeculativeMethod method) const;
  // Every proposer forgets `seq` (DraftProposer::Release).
  void Release(int64_t seq) const;

 private:
  std::unique_ptr<DraftProposer> ngram_;
  DraftProposer* draft_ = nullptr;
};

}  // namespace kvserve::speculative
