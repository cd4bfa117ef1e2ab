// The checks of a request's sampling settings and token ids that need only the model's
// vocabulary (Engine::Validate runs them at submission): InvalidArgument naming the request
// field and what is wrong, so the front ends answer 400 / INVALID_ARGUMENT with it.
#pragma once

#include "absl/status/status.h"
#include "engine/request_spec.h"

namespace kvserve::engine {

// temperature, top_p, top_k, min_p, the penalties, logprobs, logit_bias, stop_token_ids,
// allowed_token_ids and bad_words (ids in [0, vocab_size)).
absl::Status ValidateSampling(const RequestSpec& spec, int vocab_size);

}  // namespace kvserve::engine
