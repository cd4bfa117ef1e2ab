// Engine: the serving loop. One dedicated thread owns the scheduler, the KV cache
// manager and the model runner; front-end threads talk to it only through Submit/Abort
// (a mutex-guarded inbox) and read results from per-request TokenStreams.
//
//   front ends ── Submit/Abort ──► inbox_ (vector, swapped out in O(1) per step)
//                                      │
//   loop thread: drain inbox → Scheduler::Schedule → ModelRunner::Execute
//                → Scheduler::Update → TokenEvents pushed to streams (never blocks)
//                → observer hooks (metrics)
//
// A lock-free inbox buys nothing at thousands of requests per second; the mutex is held
// only to append or to swap the vector. The loop sleeps on a condition variable when
// there is no work; it never spins.
//
// Admission bounds (max_waiting globally, max_queued per tenant) are checked in Submit
// with atomic counters, so a flood is refused on the caller's thread (429) before it can
// grow the engine's queues.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/clock.h"
#include "base/logger.h"
#include "cache/kv_cache_manager.h"
#include "config/config.h"
#include "engine/embedding_pool.h"
#include "engine/engine_factory.h"
#include "engine/kv_tier_bridge.h"
#include "engine/model_runner.h"
#include "engine/prompt_logprobs.h"
#include "engine/request_compression.h"
#include "engine/stream_wakeups.h"
#include "lora/active_adapters.h"
#include "lora/adapter_registry.h"
#include "scheduler/scheduler.h"

namespace kvserve::engine {

struct ModelInfo {
  std::string name;  // served model name (prefix-cache key, metrics label)
  int64_t max_model_len = 2048;
  std::vector<int32_t> eos_token_ids;
  int vocab_size = 0;
  // Every layer attends a sliding window of at most this many tokens (0: some layer attends
  // the whole context): the scheduler releases blocks that left it (release_before).
  int32_t kv_window = 0;
};

class Engine final : public ServingEngine {
 public:
  // `cache` and `runner` must outlive the engine; the engine thread is their only user
  // once Start() ran.
  Engine(const config::Config& config, ModelInfo model, cache::KvCacheManager& cache,
         ModelRunner& runner, EngineDeps deps);
  ~Engine() override;

  void Start();
  // Stops the loop; requests still in flight end with FinishReason::kAbort.
  void Stop();
  // True once Stop() was called (the loop ends at its next iteration).
  bool stopping() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  absl::StatusOr<std::shared_ptr<TokenStream>> Submit(RequestSpec spec) override;
  void Abort(const std::string& request_id) override;
  void FinishAsStopped(const std::string& request_id) override;
  EngineStats Stats() const override;
  void StartDrain() override;
  int InFlight() const override { return in_flight_.load(); }
  void AbortAll() override;
  int64_t max_model_len() const override { return model_.max_model_len; }
  bool serves_adapters() const override { return lora_ != nullptr; }
  bool HasAdapter(const std::string& name) const override;
  std::vector<AdapterCard> ListAdapters() const override;
  absl::Status LoadAdapter(const std::string& name, const std::string& path) override;
  absl::Status UnloadAdapter(const std::string& name) override;
  // Wakes the loop (the remote tier's I/O thread calls it when a lookup was answered).
  void WakeForTier();

 private:
  struct Command {
    enum class Kind { kSubmit, kAbort, kAbortAll } kind;
    RequestSpec spec;                     // kSubmit
    std::shared_ptr<TokenStream> stream;  // kSubmit
    int tenant = 0;                       // kSubmit
    ResolvedCompression compression;      // kSubmit
    base::Nanos arrival = 0;
    std::string request_id;                      // kAbort
    FinishReason reason = FinishReason::kAbort;  // kAbort: kAbort, or kStop (FinishAsStopped)
    lora::AdapterHandle lora;                    // kSubmit: the pinned adapter; empty: base
  };

  struct Request {
    std::string id;
    std::shared_ptr<TokenStream> stream;
    std::vector<cache::SeqId> seqs;  // one per sample
    int unfinished = 0;
    bool admitted = false;  // left the waiting count
    RequestTimeline timeline;
    base::Nanos last_token = 0;
    std::vector<int64_t> generated;      // per sample
    CompressionAccount compression;      // sample 0's rounds, peak, audit
    int64_t spec_draft_tokens = 0;       // all samples' verified guesses (usage)
    int64_t spec_accepted_tokens = 0;    // of them, accepted
    PromptLogprobsBook prompt_logprobs;  // prompt_logprobs requests (sample 0's prefill)
    EmbeddingPool embedding;             // embedding requests
    int32_t lora_id = -1;                // lora_active_ id; -1: base

    explicit Request(const ResolvedCompression& c) : compression(c) {}
  };

  // Submit without the rejection report.
  absl::StatusOr<std::shared_ptr<TokenStream>> SubmitChecked(RequestSpec spec);
  absl::Status Validate(const RequestSpec& spec) const;
  absl::StatusOr<int> ResolveTenant(const std::string& name) const;
  absl::StatusOr<ResolvedCompression> ResolvePolicy(const RequestSpec& spec, int tenant) const;
  const config::TenantConfig* tenant_config(int tenant) const;
  // Summaries and observer reports of the rounds the runner ran this step.
  void OnCompactions(const scheduler::StepResult& result);
  void UpdatePressure(double kv_usage);

  void Loop();
  void Apply(Command& cmd);
  void AddRequest(Command& cmd);
  void AbortRequest(uint64_t key, FinishReason reason, const std::string& error = {},
                    bool unavailable = false);
  void PostAbort(const std::string& request_id, FinishReason reason);
  void Step();
  void OnScheduled(const scheduler::StepPlan& plan);
  void Publish(const std::vector<scheduler::SeqUpdate>& updates);
  void FinishSample(Request& r, uint64_t key, int sample, FinishReason reason,
                    std::optional<int32_t> stop_token, TokenEvent event);
  void Forget(uint64_t key);
  void FailAll(const absl::Status& status);
  void ReportStep(base::Nanos started, const scheduler::StepPlan& plan);
  void ReportTiers(const cache::CacheUsage& usage);
  // vLLM's lora_requests_info: the observer hears the running / waiting adapters when they change.
  void ReportLora();
  // The adapter `name` names, pinned (engine_lora.cc); empty name: no adapter.
  absl::StatusOr<lora::AdapterHandle> PinAdapter(const std::string& name);

  const config::Config config_;
  std::vector<KvTierPrecision> tier_precisions_;  // demotion tiers, for StepStats
  const ModelInfo model_;
  cache::KvCacheManager& cache_;
  ModelRunner& runner_;
  base::Logger logger_;
  EngineObserver* observer_;
  KvTierBridge* tiers_;  // null: no remote tier
  const compression::PolicyContext* compression_;
  std::shared_ptr<const base::Clock> clock_;
  std::vector<std::string> tenant_names_;  // index = scheduler tenant index
  lora::AdapterRegistry* lora_;            // null: no adapters served (thread-safe)
  lora::ActiveAdapters* lora_active_;      // engine thread only
  LoraState lora_reported_;                // engine thread only
  uint64_t lora_version_ = ~0ull;          // lora_active_->version() last reported

  // ---- shared with front-end threads
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> inbox_;
  bool stop_ = false;
  bool tier_wakeup_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> alive_{true};
  // A step failed because the model is unreachable (a pipeline stage died or hangs): the
  // engine reports itself dead (/health 503) and refuses new requests; rank 0 is exiting.
  std::atomic<bool> model_unreachable_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int> queued_{0};
  std::unique_ptr<std::atomic<int>[]> tenant_queued_;
  std::atomic<uint64_t> next_request_number_{0};
  // Published by the loop for Stats().
  std::atomic<int> stat_running_{0}, stat_waiting_{0}, stat_swapped_{0};
  std::atomic<double> stat_kv_usage_{0.0};

  const bool draft_model_loaded_;  // method draft is accepted (EngineDeps::draft_proposer)
  const double spec_row_cost_;     // EngineDeps::spec_row_cost (0: SpecParams' default)

  // ---- engine thread only
  scheduler::Scheduler scheduler_;
  absl::flat_hash_map<uint64_t, Request> requests_;
  absl::flat_hash_map<std::string, uint64_t> request_ids_;
  absl::flat_hash_map<int64_t, std::pair<uint64_t, int>> seq_owner_;  // seq -> (request, sample)
  uint64_t next_key_ = 1;
  int64_t next_seq_ = 1;
  uint64_t arrival_seq_ = 0;
  scheduler::StepPlan plan_;
  scheduler::StepResult result_;
  std::vector<scheduler::SeqUpdate> updates_;
  // This step's speculative decoding figures (StepStats::spec_*), filled after Execute.
  void CountSpeculation(const scheduler::StepPlan& plan, const scheduler::StepResult& result);
  int spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
  std::vector<int64_t> spec_accepted_per_position_;
  std::vector<Command> commands_;  // inbox swapped out here
  // Events go out quietly while commands are applied and a step is published; each stream's
  // consumer is woken once afterwards (Loop flushes before it sleeps or steps again).
  StreamWakeups wakeups_;
  bool warned_stuck_ = false;
  bool auto_pressure_ = false;
  bool reported_remote_up_ = false;  // remote tier state in the last ReportTiers  // `auto`
                                     // requests compress (pool above the high watermark)

  std::thread thread_;
};

}  // namespace kvserve::engine
