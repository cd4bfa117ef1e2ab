// The resolved compression settings of one request (request > tenant > server defaults,
// resolved by the engine), and what each policy makes of them. Budgets count every token the
// sequence holds, prompt included (the paper's convention):
//
//   slots:  0 ........ P-1 | P ........................................ n-1
//           [ prompt      ] [ generated                                  ]
//           |<- protected ->|   (protect_prompt: never evicted, never moved)
//           |<------------------- B after a round ------------------->|
//
//   policy        first evictable slot lo                    kept after a round (target)
//   full          -                                          everything (never runs)
//   triattention  P if protect_prompt else 0                 B
//   h2o           P if protect_prompt else 0                 B: lo + recent half + heavy half
//   snapkv        P if protect_prompt else 0                 B, the last `window` slots always
//   streamingllm  max(sinks, P if protect_prompt else 0)     lo + window  (B is not used)
//
// Trigger (slack): a round is due once the sequence holds target + divide_length slots and
// brings it back to target; snapkv also runs right after prefill when the prompt exceeds B.
#pragma once

#include <cstdint>
#include "absl/status/status.h"
#include "config/config.h"

namespace kvserve::compression {

struct PolicyParams {
  config::CompressionPolicyKind kind = config::CompressionPolicyKind::kFull;
  int64_t budget = 2048;        // B
  int64_t divide_length = 128;  // beta
  int64_t window = 64;          // streamingllm: recent window; snapkv: observation window
  int64_t sinks = 4;            // streamingllm: first tokens always kept
  bool protect_prompt = true;
  int64_t prompt_len = 0;       // P
  bool h2o_normalize_by_lifetime = false;  // h2o: rank by mass / (t - position) instead of mass
};

// The server-wide defaults for one policy kind and prompt; the engine then applies the
// tenant's and the request's overrides field by field.
PolicyParams ParamsFromConfig(const config::CompressionConfig& config, config::CompressionPolicyKind kind,
                              int64_t prompt_len);

// Range checks and "budget leaves room to evict": InvalidArgument naming the request field
// (kv_compression.budget, kv_compression.window, ...). `auto` must be resolved first.
absl::Status ValidateParams(const PolicyParams& params);

// First slot a round may evict (see the table above); slots before it are never moved.
int64_t FirstEvictableSlot(const PolicyParams& params);
// Slots a round keeps (its target length, without the unscored tail).
int64_t TargetLength(const PolicyParams& params);

}  // namespace kvserve::compression
