#include "scheduler/scheduler.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "compression/policy_params.h"

namespace kvserve::scheduler {

Scheduler::Scheduler(SchedulerOptions options, cache::KvCacheManager& cache,
                     speculative::DraftProposer* draft)
    : options_(std::move(options)), cache_(cache), proposers_(draft) {
  if (options_.tenants.empty()) options_.tenants.push_back(TenantLimits{});
  size_t n = options_.tenants.size();
  running_.resize(n);
  waiting_.resize(n);
  vtime_.assign(n, 0.0);
  backlogged_.assign(n, 0);
  tenant_running_.assign(n, 0);
  cursor_.assign(n, 0);
  counters_.tenant_tokens.assign(n, 0);
  KVS_CHECK(options_.max_num_batched_tokens > 0);
  KVS_CHECK(options_.max_num_seqs > 0);
  // Sliding-window models release leading blocks after each step; drafts are not combined
  // with that yet (docs/speculative.md).
  if (options_.kv_window > 0) options_.speculation = false;
}

Scheduler::QueueKey Scheduler::queue_key(const SequenceState& s) const {
  int prio = options_.queue_policy == config::QueuePolicy::kPriority ? s.priority : 0;
  return {prio, s.arrival_seq, s.id.value()};
}

SequenceState& Scheduler::state(cache::SeqId seq) {
  auto it = seqs_.find(seq.value());
  KVS_CHECK(it != seqs_.end(), "unknown sequence ", seq.value());
  return it->second;
}

const SequenceState* Scheduler::find(cache::SeqId seq) const {
  auto it = seqs_.find(seq.value());
  return it == seqs_.end() ? nullptr : &it->second;
}

void Scheduler::Add(SequenceState seq) {
  KVS_CHECK(seq.tenant >= 0 && seq.tenant < static_cast<int>(options_.tenants.size()),
            "tenant index ", seq.tenant);
  KVS_CHECK(!seq.tokens.empty() && seq.num_prompt_tokens > 0);
  KVS_CHECK(!seqs_.contains(seq.id.value()), "duplicate sequence ", seq.id.value());
  seq.status = SeqStatus::kWaiting;
  seq.num_computed = 0;
  cache::SeqId id = seq.id;
  bool pending = seq.fork_parent.has_value();
  auto [it, inserted] = seqs_.emplace(id.value(), std::move(seq));
  if (pending) {
    pending_forks_.push_back(id);
    state(*it->second.fork_parent).pending_children++;
  } else {
    waiting_[it->second.tenant].insert({queue_key(it->second), id});
  }
}

int Scheduler::num_waiting() const {
  size_t n = pending_forks_.size();
  for (const auto& q : waiting_) n += q.size();
  return static_cast<int>(n) + num_remote_waiting_;
}

bool Scheduler::has_work() const {
  // Sequences parked for the remote tier are not work until their lookup is done.
  return running_count_ > 0 || !swapped_.empty() || num_waiting() > num_remote_waiting_ ||
         !forget_next_.empty();
}

void Scheduler::take_remote_lookups(std::vector<RemoteLookup>& out) {
  for (auto& l : remote_lookups_) out.push_back(std::move(l));
  remote_lookups_.clear();
}

void Scheduler::remote_lookup_done(cache::SeqId seq) {
  auto it = seqs_.find(seq.value());
  if (it == seqs_.end() || it->second.status != SeqStatus::kWaitingForRemote) return;
  SequenceState& s = it->second;
  s.status = SeqStatus::kWaiting;
  --num_remote_waiting_;
  waiting_[s.tenant].insert({queue_key(s), s.id});
}

void Scheduler::add_running(SequenceState& s) {
  auto& list = running_[s.tenant];
  QueueKey key = queue_key(s);
  auto pos = std::lower_bound(
      list.begin(), list.end(), key,
      [&](cache::SeqId id, const QueueKey& k) { return queue_key(seqs_.at(id.value())) < k; });
  list.insert(pos, s.id);
  s.status = SeqStatus::kRunning;
  ++running_count_;
  ++tenant_running_[s.tenant];
  if (s.lora_id >= 0) ++running_loras_[s.lora_id];
}

bool Scheduler::lora_admissible(const SequenceState& s) const {
  if (s.lora_id < 0) return true;
  return running_loras_.contains(s.lora_id) ||
         static_cast<int>(running_loras_.size()) < options_.max_loras;
}

void Scheduler::remove_running(SequenceState& s) {
  auto& list = running_[s.tenant];
  auto it = std::find(list.begin(), list.end(), s.id);
  KVS_CHECK(it != list.end(), "sequence ", s.id.value(), " not running");
  list.erase(it);
  --running_count_;
  --tenant_running_[s.tenant];
  if (s.lora_id >= 0) {
    auto l = running_loras_.find(s.lora_id);
    if (--l->second == 0) running_loras_.erase(l);
  }
}

void Scheduler::release(SequenceState& s) {
  switch (s.status) {
    case SeqStatus::kRunning:
      remove_running(s);
      break;
    case SeqStatus::kWaiting:
      if (s.fork_parent) {
        auto it = std::find(pending_forks_.begin(), pending_forks_.end(), s.id);
        if (it != pending_forks_.end()) pending_forks_.erase(it);
        if (auto p = seqs_.find(s.fork_parent->value()); p != seqs_.end())
          p->second.pending_children--;
      } else {
        waiting_[s.tenant].erase({queue_key(s), s.id});
      }
      break;
    case SeqStatus::kSwapped:
      swapped_.erase({queue_key(s), s.id});
      break;
    case SeqStatus::kWaitingForRemote:
      --num_remote_waiting_;
      break;
    case SeqStatus::kFinished:
      break;
  }
  cache_.free(s.id);
  proposers_.Release(s.id.value());
  s.tiers_granted = 0;
  // A swapped-out sequence is unknown to the runner except for its parked compression state.
  if (s.known_to_runner || s.runner_keeps_state) forget_next_.push_back(s.id);
  s.known_to_runner = false;
  s.runner_keeps_state = false;
  s.status = SeqStatus::kFinished;
}

void Scheduler::Abort(cache::SeqId seq) {
  auto it = seqs_.find(seq.value());
  if (it == seqs_.end()) return;
  release(it->second);
  seqs_.erase(it);
}

// A running sequence's next chunk: everything unfed, limited by the budget (chunked
// prefill) and, while samples are waiting to fork from it, stopping one token short of
// the prompt's end so the children can share every block but the last token's.
// A compressing sequence always chunks at max_chunk: its footprint bound (target + slack +
// one chunk) is what admission counts on.
int Scheduler::tokens_to_feed(const SequenceState& s, int budget) const {
  int remaining = static_cast<int>(s.tokens.size()) - s.num_computed;
  if (s.pending_children > 0)
    remaining = std::min(remaining, s.num_prompt_tokens - 1 - s.num_computed);
  if (remaining <= 0) return 0;
  bool may_chunk = options_.enable_chunked_prefill;
  if (s.max_chunk > 0 && s.max_chunk < budget) {
    budget = s.max_chunk;
    may_chunk = true;
  }
  if (remaining <= budget) return remaining;
  return may_chunk ? budget : 0;
}

void Scheduler::emit(SequenceState& s, int num_tokens, const cache::AllocationDelta& delta,
                     StepPlan& plan, std::span<const int32_t> draft) {
  ScheduledSeq q;
  q.seq = s.id;
  q.first_position = s.num_computed;
  q.token_begin = static_cast<int32_t>(plan.token_ids.size());
  q.num_draft = static_cast<int32_t>(draft.size());
  q.num_tokens = num_tokens + q.num_draft;
  q.lora_id = s.lora_id;
  plan.token_ids.insert(plan.token_ids.end(), s.tokens.begin() + s.num_computed,
                        s.tokens.begin() + s.num_computed + num_tokens);
  plan.token_ids.insert(plan.token_ids.end(), draft.begin(), draft.end());
  q.kv_len_after = static_cast<int32_t>(cache_.num_tokens(s.id));
  q.blocks_begin = static_cast<int32_t>(plan.new_blocks.size());
  if (!s.known_to_runner) {
    auto table = cache_.block_table(s.id);
    plan.new_blocks.insert(plan.new_blocks.end(), table.begin(), table.end());
    q.num_new_blocks = static_cast<int32_t>(table.size());
    q.table_offset = 0;
    q.table_reset = true;
    plan.new_seqs.push_back(NewSeq{s.id, s.sampling, s.num_prompt_tokens, s.tokens, s.compression,
                                   s.compression_auto, s.runner_keeps_state});
    s.known_to_runner = true;
    s.runner_keeps_state = false;
  } else {
    plan.new_blocks.insert(plan.new_blocks.end(), delta.blocks.begin(), delta.blocks.end());
    q.num_new_blocks = static_cast<int32_t>(delta.blocks.size());
    q.table_offset = delta.first_changed_block;
  }
  if (delta.cow) plan.copies.push_back(*delta.cow);
  emit_window(s.id, delta, q, plan);
  q.sample = s.num_computed + num_tokens == static_cast<int32_t>(s.tokens.size());
  q.num_generated = s.num_generated();
  plan.seqs.push_back(q);
  plan.total_tokens += q.num_tokens;
  s.last_scheduled_step = step_;
  vtime_[s.tenant] += q.num_tokens / options_.tenants[s.tenant].weight;
  counters_.tenant_tokens[s.tenant] += static_cast<uint64_t>(q.num_tokens);
}

void Scheduler::emit_window(cache::SeqId id, const cache::AllocationDelta& delta, ScheduledSeq& q,
                            StepPlan& plan) {
  const int groups = cache_.num_window_groups();
  if (groups == 0) return;
  q.window_blocks_begin = static_cast<int32_t>(plan.window_blocks.size());
  if (q.table_reset) {
    for (int j = 0; j < groups; ++j) {
      auto table = cache_.window_table(id, j);
      plan.window_blocks.insert(plan.window_blocks.end(), table.begin(), table.end());
    }
    q.window_table_offset = 0;
  } else {
    plan.window_blocks.insert(plan.window_blocks.end(), delta.window_blocks.begin(),
                              delta.window_blocks.end());
    q.window_table_offset = delta.window_first_block;
  }
  q.num_window_blocks = static_cast<int32_t>(plan.window_blocks.size()) - q.window_blocks_begin;
  plan.copies.insert(plan.copies.end(), delta.window_cow.begin(), delta.window_cow.end());
}

SequenceState* Scheduler::pick_victim(const SequenceState& exclude) {
  SequenceState* worst = nullptr;
  for (auto& list : running_) {
    // Lists are ordered best first: scan from the back for the first one not yet run.
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      SequenceState& c = seqs_.at(it->value());
      if (c.id == exclude.id || c.last_scheduled_step == step_) continue;
      if (worst == nullptr || queue_key(c) > queue_key(*worst)) worst = &c;
      break;
    }
  }
  return worst;
}

void Scheduler::preempt(SequenceState& victim, StepPlan& plan) {
  preempted_this_step_ = true;
  proposers_.Release(victim.id.value());  // a proposer's own KV (draft model) goes too
  remove_running(victim);
  ++victim.num_preemptions;
  const bool was_known = victim.known_to_runner;
  if (was_known) plan.preempted.push_back(victim.id);
  victim.known_to_runner = false;
  victim.runner_keeps_state = false;
  if (options_.preemption_mode == config::PreemptionMode::kSwap && cache_.can_swap_out(victim.id)) {
    auto copies = cache_.swap_out(victim.id);
    if (copies) {
      plan.swap_out.insert(plan.swap_out.end(), copies->begin(), copies->end());
      victim.status = SeqStatus::kSwapped;
      // Its KV comes back as it was, compacted or not: the runner keeps the slot positions.
      victim.runner_keeps_state = was_known && victim.compressing();
      if (victim.runner_keeps_state) plan.parked.push_back(victim.id);
      swapped_.insert({queue_key(victim), victim.id});
      ++counters_.preemptions_swap;
      return;
    }
  }
  cache_.free(victim.id);
  victim.tiers_granted = 0;
  victim.num_computed = 0;
  victim.status = SeqStatus::kWaiting;
  waiting_[victim.tenant].insert({queue_key(victim), victim.id});
  ++counters_.preemptions_recompute;
}

void Scheduler::grant_tiers(SequenceState& s, StepPlan& plan) {
  const int tiers = std::min(cache_.num_demote_tiers(), compression::kMaxDemoteTiers);
  const int bs = cache_.block_size();
  for (int t = 0; t < tiers; ++t) {
    const int64_t want = s.compression.demote_tokens[static_cast<size_t>(t)] / bs;
    if (want <= 0 || (s.tiers_granted >> t & 1u) != 0) continue;
    const int32_t blocks =
        static_cast<int32_t>(std::min<int64_t>(want, cache_.tier_pool(t).num_usable()));
    const auto granted = cache_.reserve_tier_blocks(s.id, t, blocks);
    if (!granted) continue;  // no room in the tier now: a normal answer, try next step
    s.tiers_granted |= 1u << t;
    plan.tier_grants.push_back({s.id, t, static_cast<int32_t>(plan.tier_blocks.size()), blocks});
    plan.tier_blocks.insert(plan.tier_blocks.end(), granted->begin(), granted->end());
  }
}

int64_t Scheduler::draft_length(SequenceState& s, speculative::DraftProposer*& proposer,
                                int max_rows) {
  proposer = nullptr;
  if (!options_.speculation || !s.spec.enabled() || s.pending_children > 0) return 0;
  proposer = proposers_.For(s.spec.method);
  if (proposer == nullptr) return 0;
  // The step emits up to k + 1 tokens: k guesses and the runner's own. Never draft past
  // max_tokens, and keep every row's position inside the context.
  // k: sized from this sequence's acceptance history and the batch (DraftLength). Each guess
  // is charged a whole draft forward even when a batching proposer shares its forwards across
  // the step's sequences: on the bundled pair a forward's rows cost about as much as its fixed
  // part (kvs-tiny-draft at batch 8 drafted at a loss, 0.75x, when charged 1/N of it).
  int batch_seqs = 0;
  for (int n : tenant_running_) batch_seqs += n;
  int64_t k = std::min(
      s.spec_length.Size(s.spec.num_tokens, batch_seqs, s.spec.row_cost, proposer->guess_cost()),
      max_rows);
  k = std::min<int64_t>(k, s.stop.max_tokens - s.num_generated() - 1);
  k = std::min<int64_t>(k, options_.max_model_len - static_cast<int64_t>(s.tokens.size()) - 1);
  // A compressing sequence's step ends where a round falls due, as plain decoding's would.
  k = std::min<int64_t>(k, compression::DraftRoom(s.compression, cache_.num_tokens(s.id)));
  if (k <= 0 || !s.spec_gate.Open()) return 0;
  return k;
}

void Scheduler::fill_draft_kv(const SequenceState& s) {
  draft_kv_.params = s.compression;
  draft_kv_.auto_mode = s.compression_auto;
  draft_kv_.pressure = compress_auto_;
}

bool Scheduler::is_decoding(const SequenceState& s) {
  return s.num_computed + 1 == static_cast<int32_t>(s.tokens.size()) && s.num_generated() > 0;
}

void Scheduler::prepare_batched_drafts() {
  prepared_.clear();
  draft_tasks_.clear();
  speculative::DraftProposer* batching = proposers_.For(config::SpeculativeMethod::kDraft);
  if (batching == nullptr || !batching->batches() || !options_.speculation) return;
  for (const auto& list : running_) {
    for (cache::SeqId id : list) {
      SequenceState& s = seqs_.at(id.value());
      if (s.spec.method != config::SpeculativeMethod::kDraft || !is_decoding(s)) continue;
      speculative::DraftProposer* proposer = nullptr;
      // The step's budget is not known yet: propose() caps these guesses by it when packing.
      const int64_t k = draft_length(s, proposer, options_.max_num_batched_tokens - 1);
      if (k <= 0 || proposer != batching) continue;
      fill_draft_kv(s);
      speculative::DraftTask t;
      t.seq = id.value();
      t.tokens = s.tokens;
      t.params = &s.spec;
      t.kv = draft_kv_;
      t.max_tokens = static_cast<int>(k);
      draft_tasks_.push_back(t);
    }
  }
  if (draft_tasks_.empty()) return;
  batching->ProposeBatch(draft_tasks_, batch_guesses_, batch_offsets_);
  for (size_t i = 0; i < draft_tasks_.size(); ++i) {
    prepared_[draft_tasks_[i].seq] = i;
  }
}

int Scheduler::propose(SequenceState& s, int max_rows) {
  draft_.clear();
  if (auto it = prepared_.find(s.id.value()); it != prepared_.end()) {
    // Drafted with the step's other sequences (prepare_batched_drafts); the gate and the
    // length were decided there.
    const size_t i = it->second;
    const int32_t begin = batch_offsets_[i];
    const int32_t n = std::min(batch_offsets_[i + 1] - begin, max_rows);
    draft_.assign(batch_guesses_.begin() + begin, batch_guesses_.begin() + begin + n);
    return static_cast<int>(draft_.size());
  }
  // A batching proposer drafted for this step already, or left `s` out (its gate was opened
  // there: not again here).
  if (const speculative::DraftProposer* p = proposers_.For(s.spec.method);
      p != nullptr && p->batches()) {
    return 0;
  }
  speculative::DraftProposer* proposer = nullptr;
  const int64_t k = draft_length(s, proposer, max_rows);
  if (k <= 0) return 0;
  fill_draft_kv(s);
  proposer->Propose(s.id.value(), s.tokens, s.spec, draft_kv_, static_cast<int>(k), draft_);
  return static_cast<int>(draft_.size());
}

int Scheduler::schedule_running(SequenceState& s, int num_tokens, int budget, StepPlan& plan) {
  const bool decoding = num_tokens == 1 && is_decoding(s);
  if (decoding && budget > 1 && propose(s, budget - 1) > 0) {
    // Drafts only use free room: without it the sequence decodes one token as usual.
    if (auto delta = cache_.allocate(s.id, 1 + static_cast<int>(draft_.size()))) {
      emit(s, 1, *delta, plan, draft_);
      return 1 + static_cast<int>(draft_.size());
    }
  }
  while (true) {
    if (auto delta = cache_.allocate(s.id, num_tokens)) {
      emit(s, num_tokens, *delta, plan);
      if (s.compression.demotes()) grant_tiers(s, plan);
      return num_tokens;
    }
    SequenceState* victim = pick_victim(s);
    if (victim == nullptr) {
      preempt(s, plan);
      return 0;
    }
    preempt(*victim, plan);
  }
}

void Scheduler::run_forks(StepPlan& plan) {
  for (size_t i = 0; i < pending_forks_.size();) {
    SequenceState& child = seqs_.at(pending_forks_[i].value());
    auto parent_it = seqs_.find(child.fork_parent->value());
    if (parent_it == seqs_.end()) {
      // The parent is gone (aborted alone): the child computes its prompt itself.
      pending_forks_.erase(pending_forks_.begin() + static_cast<std::ptrdiff_t>(i));
      child.fork_parent.reset();
      waiting_[child.tenant].insert({queue_key(child), child.id});
      continue;
    }
    SequenceState& parent = parent_it->second;
    bool ready = parent.status == SeqStatus::kRunning &&
                 parent.num_computed == parent.num_prompt_tokens - 1 && parent.num_computed > 0;
    // Nothing to share, or no room to share it ever: with max_num_seqs == 1 the running
    // parent fills the only seat, so a child waiting to fork would stall it forever (it
    // computes nothing until its children fork). Such children compute their prompt
    // themselves (the prefix cache still shares the parent's full blocks).
    bool parent_needs_none = parent.num_prompt_tokens == 1 || options_.max_num_seqs == 1;
    if (!parent_needs_none &&
        (!ready || static_cast<int>(running_count_) >= options_.max_num_seqs)) {
      ++i;
      continue;
    }
    pending_forks_.erase(pending_forks_.begin() + static_cast<std::ptrdiff_t>(i));
    child.fork_parent.reset();
    parent.pending_children--;
    if (!parent_needs_none) {
      cache_.fork(parent.id, child.id);
      child.num_computed = parent.num_computed;
      add_running(child);
    } else {
      waiting_[child.tenant].insert({queue_key(child), child.id});
    }
  }
  (void)plan;
}

void Scheduler::refresh_virtual_times() {
  // A tenant that becomes backlogged starts at the smallest virtual time of the tenants
  // that stayed backlogged, so time spent idle is not banked as credit.
  double min_busy = std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < vtime_.size(); ++t) {
    if (backlogged_[t]) min_busy = std::min(min_busy, vtime_[t]);
  }
  for (size_t t = 0; t < vtime_.size(); ++t) {
    bool busy = !running_[t].empty() || !waiting_[t].empty();
    if (busy && !backlogged_[t] && min_busy != std::numeric_limits<double>::infinity()) {
      vtime_[t] = std::max(vtime_[t], min_busy);
    }
    backlogged_[t] = busy;
  }
}

void Scheduler::admit_swapped(StepPlan& plan, int& budget) {
  while (!swapped_.empty() && static_cast<int>(running_count_) < options_.max_num_seqs) {
    SequenceState& s = seqs_.at(swapped_.begin()->second.value());
    const auto& limits = options_.tenants[s.tenant];
    if (limits.max_running > 0 && tenant_running_[s.tenant] >= limits.max_running) break;
    if (!lora_admissible(s)) break;
    // Swap back only when the sequence can also take its next tokens without preempting
    // anyone: otherwise it would be swapped straight out again (thrashing).
    int n_next = tokens_to_feed(s, std::max(budget, 1));
    int64_t bs = cache_.block_size();
    int64_t need = (cache_.num_tokens(s.id) + n_next + bs - 1) / bs;
    if (need > cache_.block_pool().num_free()) break;
    auto copies = cache_.swap_in(s.id);
    if (!copies) break;
    swapped_.erase(swapped_.begin());
    plan.swap_in.insert(plan.swap_in.end(), copies->begin(), copies->end());
    add_running(s);
    // Run it now only if that needs no preemption: evicting someone to make room for a
    // sequence that was just swapped back would ping-pong. Otherwise it runs next step.
    int n = tokens_to_feed(s, budget);
    if (n == 0) continue;
    auto delta = cache_.allocate(s.id, n);
    if (!delta) break;
    emit(s, n, *delta, plan);
    budget -= n;
  }
}

void Scheduler::admit_waiting(StepPlan& plan, int& budget) {
  size_t n_tenants = waiting_.size();
  std::vector<char>& blocked = scratch_blocked_;
  blocked.assign(n_tenants, 0);
  while (budget > 0 && static_cast<int>(running_count_) < options_.max_num_seqs) {
    int best = -1;
    for (size_t t = 0; t < n_tenants; ++t) {
      if (blocked[t] || waiting_[t].empty()) continue;
      if (best < 0 || vtime_[t] < vtime_[best]) best = static_cast<int>(t);
    }
    if (best < 0) return;
    const auto& limits = options_.tenants[best];
    if (limits.max_running > 0 && tenant_running_[best] >= limits.max_running) {
      blocked[best] = 1;
      continue;
    }
    // LoRA: the first waiting sequence whose adapter fits the running set (a sequence on an
    // adapter that would be one too many waits; base requests and resident adapters go ahead).
    auto head = waiting_[best].begin();
    while (head != waiting_[best].end() && !lora_admissible(seqs_.at(head->second.value()))) ++head;
    if (head == waiting_[best].end()) {
      blocked[best] = 1;
      continue;
    }
    SequenceState& s = seqs_.at(head->second.value());
    if (remote_lookups_enabled_ && !s.remote_checked && !s.compressing() &&
        !cache_.contains(s.id)) {
      // NOTE: compressing sequences never use the remote tier (they are never published to
      // it either): only exact prefix KV crosses replicas.
      s.remote_checked = true;
      const cache::PrefixProbe probe = cache_.probe_prefix(s.tokens, s.prefix_key);
      if (probe.cached_blocks < probe.eligible_blocks) {
        RemoteLookup l;
        l.seq = s.id;
        l.tenant_salt = cache::TenantSalt(s.prefix_key);
        l.first_block = probe.cached_blocks;
        cache_.prefix_hashes(s.tokens, s.prefix_key, probe.cached_blocks, probe.eligible_blocks,
                             l.hashes);
        remote_lookups_.push_back(std::move(l));
        waiting_[best].erase(head);
        s.status = SeqStatus::kWaitingForRemote;
        ++num_remote_waiting_;
        continue;
      }
    }
    if (!cache_.contains(s.id)) {
      std::span<const int32_t> lookup(s.tokens);
      int64_t lo = 0;
      if (s.compressing()) {
        // Only blocks wholly before the first evictable slot may be shared: a round moves
        // everything after it. (match_prefix keeps the last looked-up token uncached.)
        lo = compression::FirstEvictableSlot(s.compression);
        lookup = lookup.first(
            static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(lookup.size()), lo + 1)));
      }
      cache::PrefixMatch hit = cache_.match_prefix(s.id, lookup, s.prefix_key);
      s.num_computed = static_cast<int32_t>(hit.num_tokens);
      if (s.compressing()) cache_.set_publish_limit(s.id, lo);
    }
    int n = tokens_to_feed(s, budget);
    if (n == 0) {
      // Without chunked prefill the prompt does not fit in what is left of the budget.
      blocked[best] = 1;
      continue;
    }
    auto delta = cache_.allocate(s.id, n);
    if (!delta) {
      // No room: give the prefix references back and stop admitting this step, so that
      // a smaller request behind cannot overtake (and starve) this one.
      cache_.free(s.id);
      s.tiers_granted = 0;
      s.num_computed = 0;
      return;
    }
    waiting_[best].erase(head);
    add_running(s);
    emit(s, n, *delta, plan);
    budget -= n;
  }
}

void Scheduler::Schedule(StepPlan& plan) {
  plan.clear();
  plan.compress_auto = compress_auto_;
  cache_.begin_step();
  plan.step_id = ++step_;
  ++counters_.steps;
  plan.finished.swap(forget_next_);
  forget_next_.clear();
  run_forks(plan);
  refresh_virtual_times();

  int budget = options_.max_num_batched_tokens;
  preempted_this_step_ = false;
  prepare_batched_drafts();

  // Phase A: running sequences, tenants interleaved by virtual time.
  std::fill(cursor_.begin(), cursor_.end(), 0);
  while (budget > 0) {
    int best = -1;
    for (size_t t = 0; t < running_.size(); ++t) {
      if (cursor_[t] >= running_[t].size()) continue;
      if (best < 0 || vtime_[t] < vtime_[best]) best = static_cast<int>(t);
    }
    if (best < 0) break;
    auto& list = running_[best];
    SequenceState& s = seqs_.at(list[cursor_[best]].value());
    int n = tokens_to_feed(s, budget);
    if (n == 0) {
      s.last_scheduled_step = step_;  // holds its blocks; not a victim this step
      ++cursor_[best];
      continue;
    }
    if (const int rows = schedule_running(s, n, budget, plan); rows > 0) {
      ++cursor_[best];
      budget -= rows;
    }
    // Preemption removed entries from running lists: cursors stay valid because victims
    // are never before the cursor (they were not scheduled yet, and lists are ordered
    // best first; the victim is the worst), except `s` itself, which was at the cursor.
  }

  // Phase B: admission, only when this step preempted nothing (a preempting step is
  // short of blocks; admitting would only preempt again).
  if (!preempted_this_step_) {
    admit_swapped(plan, budget);
    admit_waiting(plan, budget);
  }
  // Host prefix tier: offloads of evicted blocks run with the swap-outs, loads of host hits
  // with the swap-ins (kv_cache_manager.h explains why that order is safe).
  cache_.take_tier_copies(plan.swap_out, plan.swap_in);
}

std::optional<SeqFinish> Scheduler::check_stop(const SequenceState& s, int32_t token,
                                               std::optional<int32_t>& stop_token) const {
  int generated = s.num_generated();
  if (generated >= s.stop.min_tokens) {
    if (!s.stop.ignore_eos &&
        std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(), token) !=
            options_.eos_token_ids.end()) {
      stop_token = token;
      return SeqFinish::kEos;
    }
    if (std::find(s.stop.stop_token_ids.begin(), s.stop.stop_token_ids.end(), token) !=
        s.stop.stop_token_ids.end()) {
      stop_token = token;
      return SeqFinish::kStopToken;
    }
  }
  if (generated >= s.stop.max_tokens) return SeqFinish::kLength;
  if (static_cast<int64_t>(s.tokens.size()) >= options_.max_model_len)
    return SeqFinish::kMaxModelLen;
  return std::nullopt;
}

void Scheduler::Update(const StepPlan& plan, const StepResult& result,
                       std::vector<SeqUpdate>& out) {
  // Each plan entry's samples: one, or 1 + accepted guesses after a draft.
  step_samples_.clear();
  size_t next_sample = 0;
  for (const ScheduledSeq& q : plan.seqs) {
    if (!q.sample) {
      step_samples_.push_back({next_sample, 0});
      continue;
    }
    KVS_CHECK(next_sample < result.sampled.size(), "runner returned too few samples");
    size_t count = 1;
    while (count <= static_cast<size_t>(q.num_draft) &&
           next_sample + count < result.sampled.size() &&
           result.sampled[next_sample + count].seq == q.seq) {
      ++count;
    }
    KVS_CHECK(result.sampled[next_sample].seq == q.seq, "sample order mismatch");
    step_samples_.push_back({next_sample, count});
    next_sample += count;
  }
  // Rejected guesses leave every table first: the runner rolled its tables back before its
  // compression rounds, whose lengths below count verified slots only.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& q = plan.seqs[i];
    if (q.num_draft == 0 || step_samples_[i].second == 0) continue;
    auto it = seqs_.find(q.seq.value());
    if (it == seqs_.end() || it->second.status != SeqStatus::kRunning) continue;
    const int64_t rejected = q.num_draft - (static_cast<int64_t>(step_samples_[i].second) - 1);
    // Blocks only rejected guesses filled return to the pool.
    cache_.rollback(q.seq, rejected);
  }
  // Compression rounds next: the runner already compacted the KV and shrank its table.
  for (const Compaction& c : result.compactions) {
    auto it = seqs_.find(c.seq.value());
    if (it == seqs_.end() || it->second.status != SeqStatus::kRunning) continue;
    KVS_CHECK(cache_.num_tokens(c.seq) == c.phys_len_before, "compaction of sequence ",
              c.seq.value(), " from ", c.phys_len_before, " slots, the cache holds ",
              cache_.num_tokens(c.seq));
    const int32_t released = cache_.truncate(c.seq, c.new_phys_len);
    KVS_CHECK(released == c.blocks_freed, "compaction of sequence ", c.seq.value(), " freed ",
              released, " blocks, the runner expected ", c.blocks_freed);
  }
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& q = plan.seqs[i];
    const std::span<const SampledToken> sampled =
        std::span<const SampledToken>(result.sampled)
            .subspan(step_samples_[i].first, step_samples_[i].second);
    auto it = seqs_.find(q.seq.value());
    // Aborted while the step ran (future async engines): nothing to update.
    if (it == seqs_.end() || it->second.status != SeqStatus::kRunning) continue;
    SequenceState& s = it->second;
    const int32_t accepted = sampled.empty() ? 0 : static_cast<int32_t>(sampled.size()) - 1;
    // Only verified rows keep their KV: the fed tokens up to the draft and its accepted prefix.
    s.num_computed += q.num_tokens - q.num_draft + accepted;
    if (q.num_draft > 0) {
      for (int32_t i = 0; i < accepted; ++i) {
        KVS_CHECK(
            sampled[static_cast<size_t>(i)].token_id ==
                plan.token_ids[static_cast<size_t>(q.token_begin + q.num_tokens - q.num_draft + i)],
            "sequence ", s.id.value(), ": the runner accepted a token that was not drafted");
      }
      s.spec_gate.Record(q.num_draft, accepted, s.spec.min_acceptance);
      s.spec_length.Record(q.num_draft, accepted);
      s.spec_draft_tokens += q.num_draft;
      s.spec_accepted_tokens += accepted;
      ++counters_.spec_drafts;
      counters_.spec_draft_tokens += static_cast<uint64_t>(q.num_draft);
      counters_.spec_accepted_tokens += static_cast<uint64_t>(accepted);
      if (counters_.spec_accepted_per_position.size() < static_cast<size_t>(q.num_draft)) {
        counters_.spec_accepted_per_position.resize(static_cast<size_t>(q.num_draft), 0);
      }
      for (int32_t i = 0; i < accepted; ++i)
        ++counters_.spec_accepted_per_position[static_cast<size_t>(i)];
    }
    // Tokens first (accepted guesses are part of what the KV holds), each checked for a stop.
    bool finished = false;
    for (const SampledToken& t : sampled) {
      s.tokens.push_back(t.token_id);
      SeqUpdate u;
      u.seq = s.id;
      u.request_key = s.request_key;
      u.sample_index = s.sampling.sample_index;
      u.token = t;
      u.finish = check_stop(s, t.token_id, u.stop_token);
      finished = u.finish.has_value();
      out.push_back(std::move(u));
      if (finished) break;  // tokens after a stop are dropped
    }
    if (cache_.prefix_caching_enabled()) {
      // Only verified tokens: num_computed never counts a rejected guess.
      const size_t n = std::min(static_cast<size_t>(s.num_computed), s.tokens.size());
      cache_.commit_full_blocks(s.id, std::span<const int32_t>(s.tokens.data(), n));
    }
    // The next row (at index num_computed) attends [num_computed - window + 1, ...]: every
    // layer's (kv_window), or the window layers' (layer groups, window tables).
    const int32_t window = options_.kv_window > 0 ? options_.kv_window : cache_.group_window();
    if (window > 0) cache_.release_before(s.id, s.num_computed - window + 1);
    if (finished) {
      release(s);
      seqs_.erase(it);
    }
  }
}

int64_t Scheduler::live_logical_tokens() const {
  int64_t n = 0;
  for (const auto& list : running_) {
    for (cache::SeqId id : list) n += seqs_.at(id.value()).num_computed;
  }
  return n;
}

int64_t Scheduler::live_physical_tokens() const {
  int64_t n = 0;
  for (const auto& list : running_) {
    for (cache::SeqId id : list) n += cache_.num_tokens(id);
  }
  return n;
}

}  // namespace kvserve::scheduler
