// The one place that maps a policy kind to its strategy class. The engine resolves the
// request's settings (request > tenant > server, `auto` decided), calls CreatePolicy once per
// request and from then on talks only to the CompressionPolicy interface.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "compression/compression_policy.h"
#include "compression/policy_params.h"
#include <span>

#include "model/forward_model.h"
#include "model/model_config.h"

namespace kvserve::compression {

// InvalidArgument from ValidateParams (naming the kv_compression.* field); FailedPrecondition
// for triattention without statistics or with statistics of another shape. `full` gives a
// policy whose Due() is always false and whose Run() never touches the cache.
// The model-wide context every policy of a model shares: its shape from `config` and its
// RoPE table (`rope_inv_freq`, [head_dim / 2], after scaling; the TriAttention scorer and
// SnapKV rotate with it). `stats` may be null (then triattention is unavailable). The table
// and both pointers must outlive the policies.
PolicyContext ContextFor(const model::ModelConfig& config, std::span<const float> rope_inv_freq,
                         const TriAttentionStats* stats, const base::Clock* clock);
// Same, from any forward model (CPU or device).
PolicyContext ContextFor(const model::ForwardModel& model, const TriAttentionStats* stats, const base::Clock* clock);

absl::StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(const PolicyParams& params,
                                                                const PolicyContext& context);

}  // namespace kvserve::compression
