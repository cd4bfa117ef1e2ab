#include "server/auth/tenant_rate_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {
namespace {

RateLimitWindow Window(TokenBucket& bucket, base::Nanos now) {
  RateLimitWindow w;
  w.limit = bucket.capacity();
  w.remaining = std::max<int64_t>(0, static_cast<int64_t>(std::floor(bucket.Level(now) + 1e-9)));
  w.reset_ns = bucket.TimeUntilFull(now);
  return w;
}

}  // namespace

TenantRateLimiter::TenantRateLimiter(const std::vector<config::TenantConfig>& tenants,
                                     const base::Clock& clock, Observer observer)
    : clock_(clock), observer_(std::move(observer)) {
  const base::Nanos now = clock_.now_ns();
  for (const auto& t : tenants) {
    if (t.requests_per_minute <= 0 && t.tokens_per_minute <= 0) continue;
    auto b = std::make_unique<Buckets>();
    if (t.requests_per_minute > 0) b->requests.emplace(t.requests_per_minute, now);
    if (t.tokens_per_minute > 0) b->tokens.emplace(t.tokens_per_minute, now);
    buckets_[t.name] = std::move(b);
  }
}

TenantRateLimiter::Buckets* TenantRateLimiter::Find(const config::TenantConfig* tenant) {
  if (tenant == nullptr) return nullptr;
  auto it = buckets_.find(tenant->name);
  return it == buckets_.end() ? nullptr : it->second.get();
}

RateLimitState TenantRateLimiter::StateLocked(Buckets& b, base::Nanos now) const {
  RateLimitState s;
  if (b.requests) s.requests = Window(*b.requests, now);
  if (b.tokens) s.tokens = Window(*b.tokens, now);
  return s;
}

absl::StatusOr<RateLimitState> TenantRateLimiter::Admit(const config::TenantConfig* tenant,
                                                        int64_t input_tokens,
                                                        std::string_view prompt_field) {
  Buckets* b = Find(tenant);
  if (b == nullptr) return RateLimitState{};
  if (b->tokens && input_tokens > b->tokens->capacity()) {
    return FieldError(prompt_field,
                      absl::StrCat("the prompt has ", input_tokens, " tokens, more than tenant '",
                                   tenant->name, "' may send in a minute (tokens_per_minute=",
                                   b->tokens->capacity(), "); no wait would admit it"));
  }
  const double tokens = static_cast<double>(input_tokens);
  RateLimitState state;
  std::string_view refused_by;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const base::Nanos now = clock_.now_ns();
    base::Nanos requests_wait = b->requests ? b->requests->TimeUntil(1.0, now) : 0;
    base::Nanos tokens_wait = b->tokens ? b->tokens->TimeUntil(tokens, now) : 0;
    if (requests_wait == 0 && tokens_wait == 0) {
      if (b->requests) b->requests->Take(1.0, now);
      if (b->tokens) b->tokens->Take(tokens, now);
    } else {
      refused_by = requests_wait > 0 ? "requests" : "tokens";
    }
    state = StateLocked(*b, now);
    state.retry_after_ns = std::max(requests_wait, tokens_wait);
  }
  if (observer_) observer_(tenant->name, state, refused_by);
  if (refused_by.empty()) return state;
  return RateLimitedError(
      absl::StrCat(
          "rate limit reached for tenant '", tenant->name, "' on ", base::AsAbsl(refused_by),
          " per minute (limit ",
          refused_by == "requests" ? state.requests.limit : state.tokens.limit, ", ",
          refused_by == "tokens" ? absl::StrCat("requested ", input_tokens, ", ") : std::string(),
          "remaining ",
          refused_by == "requests" ? state.requests.remaining : state.tokens.remaining,
          "); retry after ", RetryAfterSeconds(state.retry_after_ns), " s"),
      state);
}

void TenantRateLimiter::Reconcile(const config::TenantConfig* tenant, int64_t output_tokens) {
  Buckets* b = Find(tenant);
  if (b == nullptr || !b->tokens) return;
  RateLimitState state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const base::Nanos now = clock_.now_ns();
    b->tokens->Take(static_cast<double>(std::max<int64_t>(0, output_tokens)), now);
    state = StateLocked(*b, now);
  }
  if (observer_) observer_(tenant->name, state, "");
}

void TenantRateLimiter::Release(const config::TenantConfig* tenant, int64_t input_tokens) {
  Buckets* b = Find(tenant);
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const base::Nanos now = clock_.now_ns();
  if (b->requests) b->requests->Take(-1.0, now);
  if (b->tokens) b->tokens->Take(-static_cast<double>(input_tokens), now);
}

}  // namespace kvserve::server
