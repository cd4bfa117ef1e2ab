// The resolved compression settings of one request (request > tenant > server defaults,
// resolved by the engine), and what each policy makes of them. Budgets count every token the
// sequence holds, prompt included (the paper's convention), and every policy compresses back
// to the same B, so policies compare at equal peak memory:
//
//   slots:  0 ........ P-1 | P ........................................ n-1
//           [ prompt      ] [ generated                                  ]
//           |<- protected ->|   (protect_prompt: never evicted, never moved)
//           |<------------------- B after a round ------------------->|
//
//   policy        first evictable slot lo                    kept after a round (target B)
//   full          -                                          everything (never runs)
//   triattention  P if protect_prompt else sinks             lo + top scores (+ recent window
//                                                            when the prompt is unprotected)
//   h2o           P if protect_prompt else 0                 lo + recent half + heavy half
//   snapkv        P if protect_prompt else 0                 lo + top + the last `window` slots
//   streamingllm  max(sinks, P if protect_prompt else 0)     lo + the last B - lo slots
//
// When (the paper's setting): rounds run after decode steps only (next position > P), never
// between prefill chunks, unless compress_prefill asks for it; snapkv also runs once right
// after prefill when the prompt exceeds B (its observation window is the prompt's end).
// Trigger (slack): a round is due once the sequence holds B + slack slots and brings it back
// to B; slack = divide_length, or by default min(128, max(1, B / 4)), so the peak stays at
// most 1.25 B (and B + 128 for large budgets, the reference implementation's setting).
#pragma once

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "config/config.h"

namespace kvserve::compression {

// TriAttention variants (the paper's default first); the others are for diagnosis.
enum class TriSelection {
  kCrossLayer,  // per layer z-score per query head, max over the KV group, mean over layers:
                // one kept set per KV head, the same in every layer (reference `per_head`)
  kPerLayer,    // a separate kept set per (layer, KV head) (reference per-layer mode)
};
enum class TriScoreTerms { kBoth, kTrigOnly, kNormOnly };  // which terms of the score count
enum class TriOffsetPool { kMean, kMax };                  // aggregation over future offsets

inline constexpr int64_t kDefaultSlackCap = 128;         // the reference's divide_length
inline constexpr int64_t kDefaultTriRecentWindow = 128;  // the vLLM port's recent window
inline constexpr int64_t kDefaultSnapKvWindow = 64;
// Lower-precision tiers a request may demote into (tier 0, the pool itself, is full precision;
// kernels/cpu/paged_attention.h carries up to 8 tiers in a table entry).
inline constexpr int kMaxDemoteTiers = 7;

struct PolicyParams {
  config::CompressionPolicyKind kind = config::CompressionPolicyKind::kFull;
  int64_t budget = 2048;      // B
  int64_t divide_length = 0;  // slack beta; 0: SlackLength's budget-scaled default
  int64_t window = -1;        // -1: the policy's default (see RecentWindow); snapkv: observation
                              // window; triattention: recent window always kept
  int64_t sinks = 4;          // streamingllm, and triattention with an unprotected prompt
  bool protect_prompt = true;
  int64_t prompt_len = 0;                  // P
  bool compress_prefill = false;           // also run rounds between prefill chunks
  bool h2o_normalize_by_lifetime = false;  // h2o: rank by mass / (t - position) instead of mass
  // triattention
  TriSelection tri_selection = TriSelection::kCrossLayer;
  TriScoreTerms tri_terms = TriScoreTerms::kBoth;
  TriOffsetPool tri_offset_pool = TriOffsetPool::kMean;
  int64_t tri_max_offset = 0;  // largest future offset 2^k used; 0: the model's context length
  // Importance-aware mixed precision (demotion_round.h): demote_tokens[t] tokens are held in
  // the server's demotion tier t + 1 (cache.demote_dtypes[t]) after a round; 0: tier unused.
  // Rounded down to whole blocks when a round runs.
  std::array<int64_t, kMaxDemoteTiers> demote_tokens{};

  bool demotes() const {
    for (int64_t n : demote_tokens) {
      if (n > 0) return true;
    }
    return false;
  }
};

// The server-wide defaults for one policy kind and prompt; the engine then applies the
// tenant's and the request's overrides field by field.
PolicyParams ParamsFromConfig(const config::CompressionConfig& config,
                              config::CompressionPolicyKind kind, int64_t prompt_len);

// Range checks and "budget leaves room to evict": InvalidArgument naming the request field
// (kv_compression.budget, kv_compression.window, ...). `auto` must be resolved first.
absl::Status ValidateParams(const PolicyParams& params);

// First slot a round may evict (see the table above); slots before it are never moved.
int64_t FirstEvictableSlot(const PolicyParams& params);
// Slots a round keeps (its target length, without the unscored tail): B for every policy.
int64_t TargetLength(const PolicyParams& params);
// Slots over the target before a round runs: divide_length, or min(128, max(1, B / 4)).
int64_t SlackLength(const PolicyParams& params);
// Recent slots always kept: snapkv's observation window (default 64); triattention's recent
// window: an explicit `window`, else with an unprotected prompt 128 capped at half of
// B - sinks (so small budgets still select), with a protected prompt 0 (the paper);
// streamingllm B - lo; 0 otherwise.
int64_t RecentWindow(const PolicyParams& params);

// Speculative decoding (docs/speculative.md): the most guesses a step of a sequence holding
// `phys_len` KV slots may draft, so that its greedy output stays what plain decoding gives.
// Rounds run after a step, once the step's slots reach TargetLength + SlackLength; rows past
// that length would attend KV that plain decoding compacts first, so the step's 1 + k rows end
// where a round falls due. Unbounded for `full`; 0 for h2o, whose attention mass arrives
// summed over a step's rows, rejected guesses' rows included.
int64_t DraftRoom(const PolicyParams& params, int64_t phys_len);

}  // namespace kvserve::compression
