// CompressionPolicy: the per-request KV eviction strategy (full, triattention, streamingllm,
// snapkv, h2o), created once by CreatePolicy (policy_factory.h) from the resolved settings.
// No code outside the factory branches on the policy kind.
//
// Integration (engine thread, after a step's forward pass, per sequence):
//
//   forward(step) ──► slots.Append(first_position, num_new)          every step that wrote KV
//                 ──► policy.ObserveQueries / ObserveAttentionMass    if policy.needs() asks,
//                     once per step from the step's side-output buffers (all layers)
//   if policy.Due(phys_len, next_position):
//       result = policy.Run({&kv_access, table, phys_len, &slots, next_position})
//                     score (keys read through KvAccess), select, KvAccess::Compact,
//                     SlotState::ApplyKeepPlan
//       kv_cache_manager.truncate(seq, result.new_phys_len)          frees result.blocks_freed()
//
// One round, for every (layer, KV head) row of the sequence:
//
//   slots:   [0, lo)            candidates [lo, n)                       n = phys_len
//            pinned prefix      score -> select K = target - lo          (K equal for all rows)
//   after:   [0, lo)  [kept, ascending by slot, i.e. by position]        n' = target
//
// A round with nothing to evict (n <= target) returns compacted = false and touches neither
// the cache nor the SlotState, so a policy whose budget covers the whole sequence behaves
// exactly like `full`.
//
// Audit semantics (RoundResult): evicted_slots = n - n' (the same for every row: the memory a
// round frees); evicted_positions = the absolute positions that no (layer, KV head) row holds
// any more after this round but at least one row held before it. With per-head selection a
// position can survive in some rows; it is reported in the round where its last copy goes, so
// over a request's life every position is reported at most once and evicted_positions sums
// to the tokens fully gone from the cache.
//
// Preconditions of Run: every block from index first_evictable_slot() / block_size on is
// owned by this sequence alone (not shared with a fork, not published for prefix hits: see
// KvCacheManager::set_publish_limit); no other thread touches the KV during the call.
// Not thread-safe; one engine thread owns every policy. One instance per request: n > 1
// samples share it (each sample has its own SlotState).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "compression/demotion_round.h"
#include "compression/kv_access.h"
#include "compression/policy_params.h"
#include "compression/slot_state.h"

namespace kvserve::compression {

struct TriAttentionStats;
struct KeyBasis;

// Model-wide inputs every policy of a model shares; must outlive the policies.
struct PolicyContext {
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::span<const float> rope_inv_freq;                   // [head_dim / 2], the model's RoPE table
  const TriAttentionStats* triattention_stats = nullptr;  // required by triattention (checked
                                                          // with CheckCompatible at load)
  const base::Clock* clock = nullptr;                     // phase timings; required
  const KeyBasis* key_basis = nullptr;  // low-rank key tiers (cache.lowrank_key_rank); checked with
                                        // CheckCompatible at load
  int64_t max_context = 0;  // the model's context length (TriAttention's offset cap); 0: unknown
  // Hybrid models (Gemma 3, gpt-oss): [num_layers] each layer's sliding window, 0 for global
  // attention (ModelConfig::layer_window); empty when no window binds. A layer whose window is
  // shorter than the context (a window layer) already holds a bounded KV, so policies leave it
  // alone: it is never scored, and its rows keep the latest slots of the compacted length
  // (TensorRT-LLM's TriAttention does the same on GPT-OSS: "SWA layers keep their latest window
  // in the same compacted prefix").
  // Its mask is over physical indices; the latest slots stay contiguous in position, so the
  // mask stays exact as long as a round keeps at least window - 1 slots after the pinned
  // prefix (CheckWindowBudget).
  std::span<const int32_t> layer_window;
  int64_t binding_window = 0;  // the widest window shorter than max_context, 0 when none
  // Why this model serves policy `full` only, or null when every policy runs. Every layer
  // windowed (Mistral): the window already bounds the KV, and its blocks leave the table
  // (KvCacheManager::release_before), which a compaction would contradict. Partial rotary
  // embeddings: the policies' RoPE analysis covers every dim of a head.
  const char* full_only_reason = nullptr;
  // Layer groups (CPU backend, cache/layer_groups.h): the window layers' KV lives in tables of
  // its own that rounds never touch, so any budget keeps their masks exact.
  bool window_tables = false;

  bool windowed(int layer) const {
    if (layer_window.empty()) return false;
    const int32_t w = layer_window[static_cast<size_t>(layer)];
    return w > 0 && w <= binding_window;
  }
  int num_scored_layers() const {
    int n = 0;
    for (int l = 0; l < num_layers; ++l) n += windowed(l) ? 0 : 1;
    return n;
  }
};

// A compressing policy on a model with window layers: InvalidArgument naming
// kv_compression.budget unless every round keeps at least binding_window - 1 slots after the
// pinned prefix (budget - first evictable slot), so the window layers' physical window never
// reaches back into the pinned prefix and their masks stay exact. OK for `full`, for models
// without window layers, and with layer groups (window_tables).
absl::Status CheckWindowBudget(const PolicyParams& params, const PolicyContext& context);

// What a policy needs from the forward pass of the steps of its sequences.
struct ObserverNeeds {
  bool attention_mass = false;    // ForwardObservers::attention_mass -> ObserveAttentionMass
  bool pre_rope_queries = false;  // ForwardObservers::pre_rope_queries -> ObserveQueries
};

// One sequence's slice of ForwardObservers::attention_mass for one step:
//   mass(layer, head)[i] = data[layer * layer_stride + head * head_stride + i], i < kv_len.
struct MassView {
  const float* data = nullptr;
  int64_t layer_stride = 0;
  int64_t head_stride = 0;
  int64_t kv_len = 0;

  // From the observer buffer [num_layers][num_seqs][num_kv_heads][mass_stride] of a batch.
  static MassView FromObservers(std::span<const float> attention_mass, int64_t mass_stride,
                                int num_seqs, int seq_index, int num_kv_heads, int64_t kv_len) {
    return {attention_mass.data() + static_cast<int64_t>(seq_index) * num_kv_heads * mass_stride,
            static_cast<int64_t>(num_seqs) * num_kv_heads * mass_stride, mass_stride, kv_len};
  }
};

// One sequence's pre-RoPE query rows of one step, all layers (ForwardObservers::
// pre_rope_queries of a batch, sliced to the sequence):
//   query(layer, r)[i] = data[layer * layer_stride + r * row_stride + i], r < num_rows,
//   i < num_q_heads * head_dim; positions[r] is row r's absolute position.
struct QueryView {
  const float* data = nullptr;
  int64_t layer_stride = 0;
  int64_t row_stride = 0;
  const int32_t* positions = nullptr;
  int64_t num_rows = 0;

  // From the observer buffer [num_layers][num_tokens][q_size] of a batch: rows
  // [row_begin, row_begin + num_rows) with the batch's row positions.
  static QueryView FromObservers(std::span<const float> queries, int64_t num_tokens, int64_t q_size,
                                 const int32_t* batch_positions, int64_t row_begin,
                                 int64_t num_rows) {
    return {queries.data() + row_begin * q_size, num_tokens * q_size, q_size,
            batch_positions + row_begin, num_rows};
  }
};

struct RoundInput {
  KvAccess* kv = nullptr;                // the sequence's KV (host or device)
  std::span<const int32_t> block_table;  // covers at least phys_len slots
  int64_t phys_len = 0;
  SlotState* slots = nullptr;  // the sequence's state; slots->size() == phys_len
  int64_t next_position = 0;   // t: absolute position of the next token (tokens seen so far)
};

struct RoundResult {
  bool compacted = false;  // false: nothing evicted, cache and SlotState untouched
  int64_t phys_len_before = 0;
  int64_t new_phys_len = 0;                // truncate the block table to this many tokens
  int64_t evicted_slots = 0;               // phys_len_before - new_phys_len
  std::vector<int64_t> evicted_positions;  // ascending; see the audit semantics above
  int64_t evicted_prompt_tokens = 0;       // entries of evicted_positions < prompt_len
  int64_t blocks_before = 0;               // ceil(phys_len_before / block_size)
  int64_t blocks_after = 0;                // ceil(new_phys_len / block_size)
  base::Nanos score_ns = 0;
  base::Nanos select_ns = 0;
  base::Nanos compact_ns = 0;
  int64_t bytes_moved = 0;  // KV bytes copied (K, V and scales)
  // Demoting rounds (demotion_round.h): tokens that entered a lower tier this round (mean
  // over the (layer, KV head) rows) and the tokens each tier holds after it.
  int64_t demoted_tokens = 0;
  std::array<int64_t, kMaxDemoteTiers> tier_tokens{};

  int64_t blocks_freed() const { return blocks_before - blocks_after; }
};

inline int64_t BlocksFor(int64_t len, int block_size) {
  return (len + block_size - 1) / block_size;
}

class CompressionPolicy {
 public:
  virtual ~CompressionPolicy() = default;
  CompressionPolicy(const CompressionPolicy&) = delete;
  CompressionPolicy& operator=(const CompressionPolicy&) = delete;

  const PolicyParams& params() const { return params_; }
  config::CompressionPolicyKind kind() const { return params_.kind; }
  // Slots [0, first_evictable_slot()) are never evicted or moved (publish limit for prefix
  // caching).
  int64_t first_evictable_slot() const { return lo_; }
  // Length a round compresses back to; 0 for `full`.
  int64_t target_length() const { return target_; }

  // Whether a round is due for a sequence holding phys_len slots whose next token has
  // absolute position next_position. Default: after a decode step (next_position >
  // prompt_len, or any step with compress_prefill) once phys_len >= target + SlackLength.
  virtual bool Due(int64_t phys_len, int64_t next_position) const;
  virtual ObserverNeeds needs() const { return {}; }
  // A SlotState shaped for this policy (nothing tracked for `full`).
  virtual SlotState NewSlotState() const;

  // This sequence's pre-RoPE query rows of one step, every layer.
  virtual void ObserveQueries(SlotState& slots, const QueryView& queries) const;
  // This sequence's attention mass of one step (all layers); mass.kv_len <= slots.size().
  virtual void ObserveAttentionMass(SlotState& slots, const MassView& mass) const;

  // Score, select and compact one sequence (see the header comment).
  absl::StatusOr<RoundResult> Run(const RoundInput& in);
  // The same round for a sequence with lower-precision tiers (demotion_round.h): keeps the
  // best target at full precision, fills the tiers with the next ones, evicts the rest.
  // tiers[t] is demotion tier t + 1. Needs a policy that ranks (RankForDemotion).
  absl::StatusOr<RoundResult> RunDemoting(const RoundInput& in, std::span<const TierRound> tiers);

  // Reads the keys of the m candidates of a demoting round for one (layer, KV head) into
  // out[m][head_dim] (dequantized, post-RoPE).
  using KeyReader = absl::FunctionRef<void(int layer, int kv_head, float* out)>;
  // Scores m candidates of every (layer, KV head) row into scores[row][m] (row = layer *
  // num_kv_heads + kv_head), on the policy's own scale: higher is kept first. Default:
  // FailedPrecondition (the policy does not rank tokens; ValidateParams refuses demote then).
  virtual absl::Status RankForDemotion(const RoundInput& in, int64_t m, KeyReader read_keys,
                                       std::span<double> scores, RoundResult& timings);

 protected:
  CompressionPolicy(const PolicyParams& params, const PolicyContext& context);

  // Fills keep: [num_layers][num_kv_heads][num_keep] strictly ascending slots in [lo, n)
  // (n = in.phys_len, num_keep = target - lo < n - lo), and adds its phase times. Rows of
  // window layers (PolicyContext::windowed) are overwritten with the latest slots afterwards:
  // a policy need not score them.
  virtual absl::Status SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep,
                                  std::span<int32_t> keep, RoundResult& timings) = 0;

  const PolicyContext& context() const { return context_; }
  int group_size() const { return context_.num_q_heads / context_.num_kv_heads; }

 private:
  void CollectEvicted(const RoundInput& in, const int32_t* keep, int64_t lo, int64_t num_keep,
                      RoundResult& r);
  // keep_ rows of window layers := [n - num_keep, n).
  void KeepLatestInWindowLayers(int64_t n, int64_t num_keep);
  // Checks shared by Run and RunDemoting.
  absl::Status CheckRound(const RoundInput& in) const;
  absl::Status CheckPositions(const RoundInput& in) const;  // after CheckRound, when n > 0
  // Starts a new audit epoch over positions [0, next_position) (CollectEvicted's marks).
  void NewAuditEpoch(int64_t next_position);

  PolicyParams params_;
  PolicyContext context_;
  int64_t lo_ = 0;
  int64_t target_ = 0;
  // Round scratch, grown once and reused (n > 1 samples run their rounds one at a time).
  std::vector<int32_t> keep_;
  std::vector<uint32_t> dropped_mark_, held_mark_;  // [position] = round epoch
  uint32_t epoch_ = 0;
  DemotionScratch demotion_;
};

}  // namespace kvserve::compression
