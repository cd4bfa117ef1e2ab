// TenantRateLimiter: per-tenant token buckets on requests per minute and tokens per minute
// (tenants[].requests_per_minute / tokens_per_minute; 0: unlimited).
//
//   Admit(tenant, input tokens)   at admission, once the prompts are tokenized: takes one
//                                 request and the input tokens, both or neither; refused
//                                 with ResourceExhausted + RateLimitState (retry delay)
//   Reconcile(tenant, output)     at the request's end: charges its output tokens, which may
//                                 leave the token bucket in debt (later admissions wait)
//   Release(tenant, input)        an admitted request that never reached the engine gives
//                                 its request and input tokens back
//
// Requests without a tenant (an open server) and tenants without limits are never limited.
// Time comes from the injected clock. Thread-safe: one mutex around the buckets; the
// observer (metrics) runs outside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "config/config.h"
#include "server/auth/token_bucket.h"
#include "server/errors/rate_limit_status.h"

namespace kvserve::server {

class TenantRateLimiter {
 public:
  // Every decision: the tenant's name, its state after the decision, and which limit refused
  // it ("requests", "tokens"; "" when admitted or reconciled). Runs on the caller's thread.
  using Observer = std::function<void(std::string_view tenant, const RateLimitState& state,
                                      std::string_view refused_by)>;

  TenantRateLimiter(const std::vector<config::TenantConfig>& tenants, const base::Clock& clock,
                    Observer observer = nullptr);

  // True when some tenant has a limit.
  bool any() const { return !buckets_.empty(); }

  // Admits one request of `tenant` (null: no tenant) with `input_tokens` prompt tokens.
  // Returns the state after admission (limit 0 everywhere when the tenant is not limited),
  // or ResourceExhausted carrying the state with retry_after_ns (RateLimitStateOf), or
  // InvalidArgument naming `prompt_field` when the input alone exceeds tokens_per_minute
  // (no wait would ever admit it).
  absl::StatusOr<RateLimitState> Admit(const config::TenantConfig* tenant, int64_t input_tokens,
                                       std::string_view prompt_field);
  // Charges the output tokens of a request Admit let in.
  void Reconcile(const config::TenantConfig* tenant, int64_t output_tokens);
  // Gives back what Admit took for a request that then failed before the engine ran it.
  void Release(const config::TenantConfig* tenant, int64_t input_tokens);

 private:
  struct Buckets {
    std::optional<TokenBucket> requests;
    std::optional<TokenBucket> tokens;
  };
  Buckets* Find(const config::TenantConfig* tenant);
  RateLimitState StateLocked(Buckets& b, base::Nanos now) const;  // mu_ held

  const base::Clock& clock_;
  const Observer observer_;
  std::mutex mu_;
  // Fixed after construction (tenants live for the process); values guarded by mu_.
  absl::flat_hash_map<std::string, std::unique_ptr<Buckets>> buckets_;
};

}  // namespace kvserve::server
