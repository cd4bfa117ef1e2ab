// Timing and accounting hooks of the engine loop, bound to Prometheus by server/ (and to
// recorders in tests). All callbacks run on the engine thread, must not block, and get
// value types only. Times come from the engine's injected Clock (nanoseconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
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
  int64_t prefix_queries_tokens = 0;  // cumulative
  int64_t prefix_hits_tokens = 0;     // cumulative
  int64_t live_logical_tokens = 0;    // tokens the running sequences have seen
  int64_t live_physical_tokens = 0;   // tokens whose KV they hold
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
  // For the position histograms: evicted position p relative to the sequence length t
  // (p / t in [0,1]) and age t - p, one entry per evicted token.
  std::vector<double> evicted_relative_positions;
  std::vector<int64_t> evicted_ages;
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
  virtual void OnCompressionRound(const CompressionRoundStats& round) { (void)round; }
};

}  // namespace kvserve::engine
