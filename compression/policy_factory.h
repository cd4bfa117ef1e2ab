// The one place that maps a policy kind to its strategy class. The engine resolves the
// request's settings (request > tenant > server, `auto` decided), calls CreatePolicy once per
// request and from then on talks only to the CompressionPolicy interface.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "compression/compression_policy.h"
#include "compression/policy_params.h"
#include "model/llama_model.h"

namespace kvserve::compression {

// InvalidArgument from ValidateParams (naming the kv_compression.* field); FailedPrecondition
// for triattention without statistics or with statistics of another shape. `full` gives a
// policy whose Due() is always false and whose Run() never touches the cache.
// The model-wide context every policy of `model` shares (shape, RoPE table); `stats` may be
// null (then triattention is unavailable). Both pointers must outlive the policies.
PolicyContext ContextFor(const model::LlamaModel& model, const TriAttentionStats* stats, const base::Clock* clock);

absl::StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(const PolicyParams& params,
                                                                const PolicyContext& context);

}  // namespace kvserve::compression
