// Prometheus series of the tenants' rate limits (tenant_rate_limiter.h), part of
// PrometheusMetrics (same registry; the tenant label is bounded by it):
//
//   kvserve_rate_limited_requests_total{tenant,limit}   requests refused, limit=requests|tokens
//   kvserve_rate_limit_remaining{tenant,limit}          what the bucket held after the tenant's
//                                                        last decision (admission, refusal or
//                                                        reconciliation); 0 while in debt
//   kvserve_rate_limit_limit{tenant,limit}              the configured per-minute limit
//
// Series appear at a tenant's first decision; tenants without limits export nothing.
// Thread-safe (prometheus-cpp families and metrics are).
#pragma once

#include <string>
#include <string_view>

#include "server/errors/rate_limit_status.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server {

class RateLimitMetrics {
 public:
  RateLimitMetrics(prometheus::Registry& registry, const std::string& model_name);
  // `tenant` is already a bounded label value; `refused_by` "requests", "tokens" or "".
  void Observe(std::string_view tenant, const RateLimitState& state, std::string_view refused_by);

 private:
  prometheus::Family<prometheus::Counter>* limited_;
  prometheus::Family<prometheus::Gauge>* remaining_;
  prometheus::Family<prometheus::Gauge>* limit_;
};

}  // namespace kvserve::server
