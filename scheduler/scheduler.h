// Scheduler: continuous batching over the paged KV cache. Owned and called only by the
// engine thread.
//
//            submit                      admit (phase B)              finish / abort
//   ────────► waiting[tenant] ─────────────────────────► running ─────────────────────► gone
//                  ▲                 (prefix match,        │  ▲
//                  │ preempt: recompute  allocate)         │  │ swap in (phase B, first)
//                  └───────────────────────────────────────┤  │
//                                   preempt: swap          ▼  │
//                                                         swapped
//   waiting_for_remote (remote tier on): at admission, a sequence whose prompt has full
//   blocks no local tier holds leaves the queue once, its RemoteLookup goes to the engine,
//   and remote_lookup_done() puts it back at its original place (it holds no KV meanwhile).
//   pending_forks: samples 1..n-1 of a request wait until sample 0 has computed its
//   prompt up to the last token, then fork its blocks (copy-on-write) and run.
//
// One step (Schedule):
//   0. forks that became possible;
//   A. running sequences, decode and prefill chunks alike, picked across tenants by
//      weighted fair queuing (smallest virtual time first; a tenant's virtual time grows by
//      tokens / weight). When the pool has no room, the worst running sequence (highest
//      priority value, then newest) that is not yet in this step is preempted: swapped to
//      the host tier (preemption_mode=swap, when it fits) or freed for recompute.
//   B. only if nothing was preempted: swapped sequences come back first, then waiting ones
//      are admitted, again picked across tenants by virtual time, subject to max_num_seqs
//      and the tenant's max_running. A sequence that does not get its blocks stops
//      admission for the step (no overtaking by smaller requests).
// Admission (who may hold KV: phase B, the capacity decision) is kept apart from packing
// (which tokens run now: the token budget and chunking in both phases).
//
// Fairness is weighted fair queuing on scheduled tokens, not deficit round robin: virtual
// time is per tenant, and a tenant that was idle restarts at the smallest virtual time of
// the tenants that stayed busy, so idling earns no credit. Over a run in which several
// tenants are backlogged, each receives tokens in proportion to its weight.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cache/kv_cache_manager.h"
#include "config/config.h"
#include "scheduler/sequence.h"
#include "scheduler/step_plan.h"
#include "speculative/draft_proposer.h"

namespace kvserve::scheduler {

struct TenantLimits {
  double weight = 1.0;
  int max_running = 0;  // 0: no limit
};

struct SchedulerOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  bool enable_chunked_prefill = true;
  config::QueuePolicy queue_policy = config::QueuePolicy::kFcfs;
  config::PreemptionMode preemption_mode = config::PreemptionMode::kRecompute;
  int64_t max_model_len = 2048;
  // > 0: every layer of the model attends at most the last kv_window tokens, so after each
  // step a sequence's blocks wholly before its next row's window go back to the pool
  // (KvCacheManager::release_before): its KV stays within the window plus a block.
  int32_t kv_window = 0;
  std::vector<int32_t> eos_token_ids;
  // Whether running sequences whose SpecParams enable it may draft (the runner verifies
  // drafts; off on backends that cannot, and for sliding-window models).
  bool speculation = false;
  std::vector<TenantLimits> tenants;  // index = SequenceState::tenant; at least one
  // LoRA: distinct adapters (SequenceState::lora_id >= 0) among running sequences, and so in
  // any step. Admission holds back a sequence whose adapter would be one too many (others
  // behind it go ahead); packing checks the bound again. 0: no adapters are served.
  int max_loras = 0;
};

// What happened to a sequence in Update: a new token and/or its end.
struct SeqUpdate {
  cache::SeqId seq;
  uint64_t request_key = 0;
  int sample_index = 0;
  std::optional<SampledToken> token;
  std::optional<SeqFinish> finish;
  std::optional<int32_t> stop_token;  // the stop/EOS id that finished it
};

// A waiting sequence whose prompt continues past the local tiers: the remote tier is asked for
// full blocks [first_block, first_block + hashes.size()) (chain hashes, tenant-salted).
struct RemoteLookup {
  cache::SeqId seq;
  uint64_t tenant_salt = 0;
  int32_t first_block = 0;
  std::vector<cache::BlockHash> hashes;
};

struct SchedulerCounters {
  uint64_t steps = 0;
  uint64_t preemptions_recompute = 0;
  uint64_t preemptions_swap = 0;
  std::vector<uint64_t> tenant_tokens;  // tokens scheduled per tenant (prefill + decode)
  // Speculative decoding: drafts verified, their guesses, the guesses accepted, and accepted
  // per draft position (index i: guesses at position i + 1 that were accepted).
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_position;
};

class Scheduler {
 public:
  // `draft` (may be null): the draft-model proposer for method draft; must outlive this.
  Scheduler(SchedulerOptions options, cache::KvCacheManager& cache,
            speculative::DraftProposer* draft = nullptr);

  // Adds a sequence (status waiting; or pending fork when fork_parent is set). The caller
  // assigns unique ids and fills tokens, num_prompt_tokens, sampling (seed resolved), stop,
  // tenant, priority, arrival and prefix_key.
  void Add(SequenceState seq);
  // Removes a sequence in any state, frees its KV, and tells the runner next step.
  // Unknown ids are ignored.
  void Abort(cache::SeqId seq);

  // Builds the next step into `plan` (cleared first). An empty plan means there is nothing
  // to run (or nothing fits: then the caller waits for new requests or aborts).
  void Schedule(StepPlan& plan);
  // The engine's KV pool is above its `auto` watermark: `auto` sequences compress in the steps
  // scheduled from now on (StepPlan::compress_auto), and so does their draft model's KV.
  void set_compress_auto(bool on) { compress_auto_ = on; }
  // Applies the runner's result: advances computed counts, appends sampled tokens, checks
  // stop conditions, publishes full blocks, frees finished sequences. Appends to `out`.
  void Update(const StepPlan& plan, const StepResult& result, std::vector<SeqUpdate>& out);

  // ---- remote KV tier (off unless enabled)
  // While enabled, a waiting sequence whose prompt has full blocks that neither the device
  // pool nor the host tier holds is parked in kWaitingForRemote (once per sequence) and a
  // RemoteLookup is queued; admission goes on with the others. Disable it while the remote
  // tier is down: then nobody waits for it.
  void set_remote_lookups(bool enabled) { remote_lookups_enabled_ = enabled; }
  void take_remote_lookups(std::vector<RemoteLookup>& out);
  // The lookup of `seq` finished (hit, miss or error): it rejoins the waiting queue at its
  // original place. Unknown or no longer parked sequences are ignored.
  void remote_lookup_done(cache::SeqId seq);
  int num_waiting_for_remote() const { return num_remote_waiting_; }

  int num_running() const { return static_cast<int>(running_count_); }
  int num_waiting() const;
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  bool has_work() const;
  const SequenceState* find(cache::SeqId seq) const;
  const SchedulerCounters& counters() const { return counters_; }
  // Tokens seen (logical) and held in KV (physical) by running sequences.
  int64_t live_logical_tokens() const;
  int64_t live_physical_tokens() const;

 private:
  using QueueKey = std::tuple<int, uint64_t, int64_t>;  // (priority or 0, arrival seq, seq id)

  QueueKey queue_key(const SequenceState& s) const;
  SequenceState& state(cache::SeqId seq);
  void run_forks(StepPlan& plan);
  // Schedules `num_tokens` of running sequence `s` (allocating KV; may preempt others).
  // Returns false if `s` itself was preempted.
  // A decode step (num_tokens == 1) may add a draft of up to budget - 1 guesses, but only
  // when the pool has room for it without preempting anyone. Returns the rows scheduled, 0
  // if `s` itself was preempted.
  int schedule_running(SequenceState& s, int num_tokens, int budget, StepPlan& plan);
  // Guesses for a decoding sequence into draft_ (at most max_rows); 0 when it does not draft.
  int propose(SequenceState& s, int max_rows);
  // How many guesses `s` drafts this step (0: none), its proposer into `proposer`. Opens
  // (and so counts down) the sequence's acceptance gate: call it once per sequence and step.
  int64_t draft_length(SequenceState& s, speculative::DraftProposer*& proposer, int max_rows);
  void fill_draft_kv(const SequenceState& s);
  // One unfed token, at least one generated: the state in which a sequence drafts.
  static bool is_decoding(const SequenceState& s);
  // Before packing: a batching proposer (the draft model) drafts for every decoding sequence
  // of its method in one call; propose() then hands each its share.
  void prepare_batched_drafts();
  // The window tables' part of an allocation (layer groups), into q and the plan.
  void emit_window(cache::SeqId id, const cache::AllocationDelta& delta, ScheduledSeq& q,
                   StepPlan& plan);
  void emit(SequenceState& s, int num_tokens, const cache::AllocationDelta& delta, StepPlan& plan,
            std::span<const int32_t> draft = {});
  // Grants a running demoting sequence the tier blocks its demote_tokens ask for, each tier at
  // once when its pool has room (otherwise tried again next step; until then rounds evict).
  void grant_tiers(SequenceState& s, StepPlan& plan);
  int tokens_to_feed(const SequenceState& s, int budget) const;
  void preempt(SequenceState& victim, StepPlan& plan);
  SequenceState* pick_victim(const SequenceState& exclude);
  void add_running(SequenceState& s);
  void remove_running(SequenceState& s);
  void admit_swapped(StepPlan& plan, int& budget);
  void admit_waiting(StepPlan& plan, int& budget);
  // LoRA: whether `s` may join the running set without exceeding max_loras adapters.
  bool lora_admissible(const SequenceState& s) const;
  void refresh_virtual_times();
  std::optional<SeqFinish> check_stop(const SequenceState& s, int32_t token,
                                      std::optional<int32_t>& stop_token) const;
  void release(SequenceState& s);

  SchedulerOptions options_;
  cache::KvCacheManager& cache_;

  absl::flat_hash_map<int64_t, SequenceState> seqs_;
  // Per tenant, running sequences ordered by queue key (best first).
  std::vector<std::vector<cache::SeqId>> running_;
  size_t running_count_ = 0;
  std::vector<std::set<std::pair<QueueKey, cache::SeqId>>> waiting_;
  std::set<std::pair<QueueKey, cache::SeqId>> swapped_;
  std::vector<cache::SeqId> pending_forks_;
  std::vector<cache::SeqId> forget_next_;  // runner must drop these (finished or aborted)

  std::vector<double> vtime_;
  std::vector<char> backlogged_;
  std::vector<int> tenant_running_;
  absl::flat_hash_map<int32_t, int> running_loras_;  // lora_id -> running sequences
  std::vector<size_t> cursor_;  // scratch: phase A position per tenant
  std::vector<char> scratch_blocked_;
  bool preempted_this_step_ = false;
  bool compress_auto_ = false;
  bool remote_lookups_enabled_ = false;
  int num_remote_waiting_ = 0;
  std::vector<RemoteLookup> remote_lookups_;
  int64_t step_ = 0;
  SchedulerCounters counters_;
  speculative::ProposerSet proposers_;
  std::vector<int32_t> draft_;     // scratch: this sequence's guesses
  speculative::DraftKv draft_kv_;  // scratch: this sequence's compression, for its proposer
  // A batching proposer's guesses for this step's decoding sequences (prepare_batched_drafts):
  // sequence id -> its task; task i's guesses are batch_guesses_[offsets[i], offsets[i + 1]).
  absl::flat_hash_map<int64_t, size_t> prepared_;
  std::vector<speculative::DraftTask> draft_tasks_;
  std::vector<int32_t> batch_guesses_, batch_offsets_;
  // Scratch of Update: per plan entry, its samples in result.sampled (first, count).
  std::vector<std::pair<size_t, size_t>> step_samples_;
};

}  // namespace kvserve::scheduler
