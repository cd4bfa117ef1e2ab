// A tenant's rate-limit state as clients see it, and how it travels: inside an absl::Status
// (a ResourceExhausted refusal carries it as a payload, so the front ends can answer with the
// retry delay without knowing the limiter), and out as OpenAI's headers:
//
//   retry-after                      refusals only: whole seconds until the request fits
//   x-ratelimit-limit-requests       requests_per_minute
//   x-ratelimit-remaining-requests   whole requests left in the bucket now
//   x-ratelimit-reset-requests       until the bucket is full again ("1s", "6m0s", "20ms")
//   x-ratelimit-{limit,remaining,reset}-tokens   the same for tokens_per_minute
//
// A limit of 0 (not configured) sends none of its headers. Names are lower case so that
// the same list serves as gRPC trailing metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/clock.h"

namespace kvserve::server {

struct RateLimitWindow {
  int64_t limit = 0;         // per minute; 0: not limited
  int64_t remaining = 0;     // whole units left now (0 while in debt)
  base::Nanos reset_ns = 0;  // until the bucket is full again
};

struct RateLimitState {
  RateLimitWindow requests;
  RateLimitWindow tokens;
  base::Nanos retry_after_ns = 0;  // a refusal: until the refused request would fit; else 0

  bool limited() const { return requests.limit > 0 || tokens.limit > 0; }
};

// ResourceExhausted with `message` and `state` as its payload.
absl::Status RateLimitedError(std::string_view message, const RateLimitState& state);
// The state a RateLimitedError carries; nullopt for any other status.
std::optional<RateLimitState> RateLimitStateOf(const absl::Status& status);

using HeaderList = std::vector<std::pair<std::string, std::string>>;
// The headers above; `retry-after` only when state.retry_after_ns > 0.
HeaderList RateLimitHeaders(const RateLimitState& state);

// OpenAI's reset format: "20ms" under a second, else whole seconds rounded up ("1s", "59s",
// "1m0s", "1h2m3s").
std::string FormatResetDuration(base::Nanos ns);
// Whole seconds, rounded up, at least 1 (Retry-After).
int64_t RetryAfterSeconds(base::Nanos ns);

}  // namespace kvserve::server
