// Timing and accounting hooks of the engine loop, bound to Prometheus by server/ (and to
// recorders in tests). All callbacks run on the engine thread, must not block, and get
// value types only. Times come from the engine's injected Clock (nanoseconds).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/clock.h"
#include "config/config.h"
#include "engine/request_types.h"

namespace kvserve::engine {

// Labels of a request, bounded: tenant comes from config, policy from a fixed set.
struct RequestLabels {
  std::string tenant;
  std::string policy;
};

struct RequestTimeline {
  RequestLabels labels;
  base::Nanos arrival = 0;
  base::Nanos first_scheduled = 0;
  base::Nanos first_token = 0;
  base::Nanos finished = 0;
  base::Nanos prefill_ns = 0;       // time from first scheduled to first token
  base::Nanos decode_ns = 0;        // time from first token to finish
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int num_preemptions = 0;
  FinishReason finish = FinishReason::kStop;
  CompressionSummary compression;
  std::string lora;  // the LoRA adapter's name; empty: the base model
};

// Which adapters have running and waiting requests (vLLM's lora_requests_info), sent when
// it changed. Names sorted.
struct LoraState {
  int max_lora = 0;
  std::vector<std::string> running;
  std::vector<std::string> waiting;
};

// One KV precision tier as the metrics report it: per side, a label and the bytes one token
// costs there (all layers, scales included).
struct KvTierPrecision {
  std::string k_label;
  std::string v_label;
  double k_bytes_per_token = 0.0;
  double v_bytes_per_token = 0.0;
};

struct StepStats {
  base::Nanos duration_ns = 0;      // schedule + execute + update
  int num_seqs = 0;                 // sequences in the batch
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  int running = 0;
  int waiting = 0;
  int swapped = 0;
  int preemptions = 0;              // in this step
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;
  double kv_usage = 0.0;
  int64_t host_blocks_total = 0;
  int64_t host_blocks_used = 0;
  int64_t demote_blocks_total = 0;    // demotion tier pools, all tiers (issue 18)
  int64_t demote_blocks_used = 0;
  int64_t prefix_queries_tokens = 0;  // cumulative
  int64_t prefix_hits_tokens = 0;     // cumulative
  int64_t live_logical_tokens = 0;    // tokens the running sequences have seen
  int64_t live_physical_tokens = 0;   // tokens whose KV they hold
  // The pool's precision: K and V dtypes and the KV bytes per token each side costs (all
  // layers, scales included; 0 when the layout is unknown).
  config::KvDtype k_dtype = config::KvDtype::kFp32;
  config::KvDtype v_dtype = config::KvDtype::kFp32;
  double k_bytes_per_token = 0.0;
  double v_bytes_per_token = 0.0;
  // The demotion tiers' precisions (issue 18), tier order; empty without tiers. Labels are the
  // dtype names, a low-rank tier's keys "<dtype>_rank<r>" (its coefficients). Engine-owned.
  std::span<const KvTierPrecision> demote_tiers;
  // Speculative decoding this step (docs/speculative.md): drafts verified, their guessed
  // tokens, the guesses accepted, and accepted per draft position (index i: the guesses at
  // position i + 1 of their draft that were accepted). Engine-owned span.
  int spec_drafts = 0;
  int spec_draft_tokens = 0;
  int spec_accepted_tokens = 0;
  std::span<const int64_t> spec_accepted_per_position;
  // False for a state refresh after a step that ran no batch (only aborted or finished
  // sequences to forget): the state fields are current, duration and token counts are not
  // a step's.
  bool ran_batch = true;
};

struct CompressionRoundStats {
  RequestLabels labels;
  base::Nanos score_ns = 0;
  base::Nanos select_ns = 0;
  base::Nanos compact_ns = 0;
  int64_t evicted_tokens = 0;
  int64_t evicted_prompt_tokens = 0;
  int64_t blocks_reclaimed = 0;
  int64_t bytes_moved = 0;
  int64_t demoted_tokens = 0;  // tokens moved into lower-precision tiers (per KV row)
  // For the position histograms: evicted position p relative to the sequence length t
  // (p / t in [0,1]) and age t - p, one entry per evicted token.
  std::vector<double> evicted_relative_positions;
  std::vector<int64_t> evicted_ages;
};

// The tiered prefix cache, cumulative since start (tier index: kDevice, kHost, kRemote).
// Hits partition the prefix hits: a block is counted once, in the tier that served it
// (a remote block counts for the remote tier when first loaded, for the host tier after).
struct KvTierStats {
  enum Tier { kDevice = 0, kHost = 1, kRemote = 2, kNumTiers = 3 };
  static const char* TierName(int t) { return t == kDevice ? "device" : t == kHost ? "host" : "remote"; }
  int block_size = 0;
  uint64_t lookup_blocks[kNumTiers] = {};
  uint64_t hit_blocks[kNumTiers] = {};
  uint64_t read_bytes[kNumTiers] = {};     // host: loaded to the device; remote: fetched
  uint64_t written_bytes[kNumTiers] = {};  // host: offloaded from the device; remote: stored
  uint64_t remote_errors = 0;              // failed round trips
  uint64_t remote_rejected_blocks = 0;     // mismatching, truncated or corrupt records
  uint64_t remote_dropped_writes = 0;      // tier down or write queue full
  uint64_t host_dropped_blocks = 0;        // evicted device blocks the host tier had no room for
  int64_t host_blocks = 0;                 // held by the host prefix tier now
  int64_t host_capacity_blocks = 0;
  bool remote_enabled = false;
  bool remote_up = false;
  std::vector<double> remote_load_seconds;  // lookup latencies since the last report
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnTokens(const RequestLabels& labels, int count, base::Nanos inter_token_ns) {
    (void)labels, (void)count, (void)inter_token_ns;
  }
  virtual void OnRequestFinished(const RequestTimeline& timeline) { (void)timeline; }
  // The exception to "engine thread only": called on the thread that called Submit, when
  // Submit refuses a request (reason: invalid_argument, permission_denied, queue_full,
  // unavailable, failed_precondition, other). Must be thread-safe.
  virtual void OnRequestRejected(const RequestLabels& labels, const std::string& reason) {
    (void)labels, (void)reason;
  }
  virtual void OnStep(const StepStats& step) { (void)step; }
  virtual void OnLoraState(const LoraState& state) { (void)state; }
  virtual void OnCompressionRound(const CompressionRoundStats& round) { (void)round; }
  // After every step when the host or remote tier is on.
  virtual void OnKvTiers(const KvTierStats& tiers) { (void)tiers; }
};

}  // namespace kvserve::engine
