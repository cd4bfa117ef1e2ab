// Engine's per-step reports: the StepStats every observer (Prometheus, tests) receives after
// a step, and the tier counters. Apart from engine.cc, which admits, steps and publishes.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"

namespace kvserve::engine {

void Engine::ReportStep(base::Nanos started, const scheduler::StepPlan& plan) {
  cache::CacheUsage usage = cache_.usage();
  UpdatePressure(usage.usage_ratio());
  stat_running_.store(scheduler_.num_running());
  stat_waiting_.store(scheduler_.num_waiting());
  stat_swapped_.store(scheduler_.num_swapped());
  stat_kv_usage_.store(usage.usage_ratio());
  if (observer_ == nullptr) return;
  StepStats s;
  s.duration_ns = clock_->now_ns() - started;
  s.ran_batch = !plan.seqs.empty() || plan.moves_kv();
  s.num_seqs = static_cast<int>(plan.seqs.size());
  for (const auto& q : plan.seqs) {
    if (q.sample && q.num_tokens - q.num_draft == 1 && q.first_position > 0 && !q.table_reset) {
      s.num_decode_tokens += q.num_tokens;  // the decode row and its draft's verify rows
    } else {
      s.num_prefill_tokens += q.num_tokens;
    }
  }
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting();
  s.swapped = scheduler_.num_swapped();
  s.preemptions = static_cast<int>(plan.preempted.size());
  s.blocks_total = usage.total_blocks;
  s.blocks_free = usage.free_blocks;
  s.kv_usage = usage.usage_ratio();
  s.host_blocks_total = usage.swap_total_blocks;
  s.host_blocks_used = usage.swap_used_blocks;
  s.demote_blocks_total = usage.demote_total_blocks;
  s.demote_blocks_used = usage.demote_used_blocks;
  s.prefix_queries_tokens = static_cast<int64_t>(usage.prefix_query_tokens);
  s.prefix_hits_tokens = static_cast<int64_t>(usage.prefix_hit_tokens);
  s.live_logical_tokens = scheduler_.live_logical_tokens();
  s.live_physical_tokens = scheduler_.live_physical_tokens();
  if (s.ran_batch) {
    s.spec_drafts = spec_drafts_;
    s.spec_draft_tokens = spec_draft_tokens_;
    s.spec_accepted_tokens = spec_accepted_tokens_;
    s.spec_accepted_per_position = spec_accepted_per_position_;
  }
  const cache::KvLayout& layout = cache_.layout();
  if (layout.block_size > 0 && layout.num_layers > 0) {
    s.k_dtype = layout.k_dtype();
    s.v_dtype = layout.v_dtype();
    s.k_bytes_per_token = layout.side_bytes_per_token(0);
    s.v_bytes_per_token = layout.side_bytes_per_token(1);
  }
  s.demote_tiers = tier_precisions_;
  observer_->OnStep(s);
  if (tiers_ != nullptr || usage.host_cache_capacity_blocks > 0) ReportTiers(usage);
}

void Engine::ReportTiers(const cache::CacheUsage& usage) {
  KvTierStats t;
  const uint64_t bpb = cache_.bytes_per_block();
  t.block_size = usage.block_size;
  t.lookup_blocks[KvTierStats::kDevice] = usage.prefix_query_blocks;
  t.hit_blocks[KvTierStats::kDevice] = usage.prefix_hit_blocks - usage.host_hit_blocks;
  t.lookup_blocks[KvTierStats::kHost] = usage.host_query_blocks;
  t.hit_blocks[KvTierStats::kHost] = usage.host_hit_blocks - usage.remote_hit_blocks;
  t.hit_blocks[KvTierStats::kRemote] = usage.remote_hit_blocks;
  t.read_bytes[KvTierStats::kHost] = usage.host_hit_blocks * bpb;
  t.written_bytes[KvTierStats::kHost] = usage.offloaded_blocks * bpb;
  t.host_dropped_blocks = usage.offload_skipped_blocks;
  t.host_blocks = usage.host_cache_blocks;
  t.host_capacity_blocks = usage.host_cache_capacity_blocks;
  if (tiers_ != nullptr) {
    const cache::RemoteKvTierStats r = tiers_->remote_stats();
    t.remote_enabled = true;
    t.remote_up = r.available;
    t.lookup_blocks[KvTierStats::kRemote] = r.lookup_blocks;
    t.read_bytes[KvTierStats::kRemote] = r.bytes_read;
    t.written_bytes[KvTierStats::kRemote] = r.bytes_written;
    t.remote_errors = r.errors;
    t.remote_rejected_blocks = r.rejected_blocks;
    t.remote_dropped_writes = r.dropped_writes;
    t.remote_load_seconds = tiers_->TakeLatencies();
    reported_remote_up_ = r.available;
  }
  observer_->OnKvTiers(t);
}

}  // namespace kvserve::engine
