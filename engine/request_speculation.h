// A request's speculative decoding, checked at Submit and resolved once against the server's
// speculative.* settings (request > server), into the SpecParams its sequences carry.
#pragma once

#include "absl/status/status.h"
#include "config/config.h"
#include "engine/request_spec.h"
#include "speculative/spec_params.h"

namespace kvserve::engine {

// InvalidArgument naming the field ("speculative.num_tokens: ...") when a value is out of range.
// Method draft is refused (naming speculative.method) unless `draft_model_loaded`.
absl::Status ValidateSpeculative(const SpeculativeRequest& r, bool draft_model_loaded = false);
// Request fields over the server default. The resolved n-gram sizes keep min <= max.
speculative::SpecParams ResolveSpeculative(const config::SpeculativeConfig& server,
                                           const SpeculativeRequest& r);

}  // namespace kvserve::engine
