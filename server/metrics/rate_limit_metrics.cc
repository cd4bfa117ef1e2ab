#include "server/metrics/rate_limit_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace kvserve::server {

RateLimitMetrics::RateLimitMetrics(prometheus::Registry& registry, const std::string& model_name) {
  const prometheus::Labels m = {{"model", model_name}};
  limited_ = &prometheus::BuildCounter()
                  .Name("kvserve_rate_limited_requests_total")
                  .Help("Requests refused by a tenant rate limit, by limit (requests, tokens).")
                  .Labels(m)
                  .Register(registry);
  remaining_ =
      &prometheus::BuildGauge()
           .Name("kvserve_rate_limit_remaining")
           .Help("Requests or tokens left in a tenant's bucket after its last rate-limit decision.")
           .Labels(m)
           .Register(registry);
  limit_ = &prometheus::BuildGauge()
                .Name("kvserve_rate_limit_limit")
                .Help("A tenant's configured per-minute rate limit, by limit (requests, tokens).")
                .Labels(m)
                .Register(registry);
}

void RateLimitMetrics::Observe(std::string_view tenant, const RateLimitState& state,
                               std::string_view refused_by) {
  const std::string t(tenant);
  if (!refused_by.empty())
    limited_->Add({{"tenant", t}, {"limit", std::string(refused_by)}}).Increment();
  for (const auto& [kind, w] :
       {std::pair<const char*, const RateLimitWindow&>{"requests", state.requests},
        std::pair<const char*, const RateLimitWindow&>{"tokens", state.tokens}}) {
    if (w.limit <= 0) continue;
    remaining_->Add({{"tenant", t}, {"limit", kind}}).Set(static_cast<double>(w.remaining));
    limit_->Add({{"tenant", t}, {"limit", kind}}).Set(static_cast<double>(w.limit));
  }
}

}  // namespace kvserve::server
