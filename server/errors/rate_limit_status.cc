#include "server/errors/rate_limit_status.h"

#include <algorithm>
#include <array>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/absl_compat.h"

namespace kvserve::server {
namespace {

constexpr std::string_view kPayload = "type.kvserve.dev/rate_limit";
constexpr base::Nanos kSecondNs = 1'000'000'000;
constexpr base::Nanos kMsNs = 1'000'000;

void AddWindow(const RateLimitWindow& w, std::string_view kind, HeaderList& out) {
  if (w.limit <= 0) return;
  out.emplace_back(absl::StrCat("x-ratelimit-limit-", base::AsAbsl(kind)), absl::StrCat(w.limit));
  out.emplace_back(absl::StrCat("x-ratelimit-remaining-", base::AsAbsl(kind)),
                   absl::StrCat(w.remaining));
  out.emplace_back(absl::StrCat("x-ratelimit-reset-", base::AsAbsl(kind)),
                   FormatResetDuration(w.reset_ns));
}

}  // namespace

absl::Status RateLimitedError(std::string_view message, const RateLimitState& s) {
  absl::Status status = absl::ResourceExhaustedError(base::AsAbsl(message));
  // Plain integers: the payload only travels inside this process.
  const std::array<int64_t, 7> values = {
      s.requests.limit,   s.requests.remaining, s.requests.reset_ns, s.tokens.limit,
      s.tokens.remaining, s.tokens.reset_ns,    s.retry_after_ns};
  status.SetPayload(base::AsAbsl(kPayload), absl::Cord(absl::StrJoin(values, ",")));
  return status;
}

std::optional<RateLimitState> RateLimitStateOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return std::nullopt;
  const auto payload = status.GetPayload(base::AsAbsl(kPayload));  // absl::optional here
  if (!payload) return std::nullopt;
  std::array<int64_t, 7> v{};
  size_t i = 0;
  for (absl::string_view part : absl::StrSplit(std::string(*payload), ',')) {
    if (i == v.size() || !absl::SimpleAtoi(part, &v[i])) return std::nullopt;
    ++i;
  }
  if (i != v.size()) return std::nullopt;
  RateLimitState s;
  s.requests = {v[0], v[1], v[2]};
  s.tokens = {v[3], v[4], v[5]};
  s.retry_after_ns = v[6];
  return s;
}

HeaderList RateLimitHeaders(const RateLimitState& state) {
  HeaderList out;
  if (state.retry_after_ns > 0)
    out.emplace_back("retry-after", absl::StrCat(RetryAfterSeconds(state.retry_after_ns)));
  AddWindow(state.requests, "requests", out);
  AddWindow(state.tokens, "tokens", out);
  return out;
}

std::string FormatResetDuration(base::Nanos ns) {
  ns = std::max<base::Nanos>(ns, 0);
  if (ns < kSecondNs) return absl::StrCat((ns + kMsNs - 1) / kMsNs, "ms");
  int64_t s = (ns + kSecondNs - 1) / kSecondNs;
  const int64_t h = s / 3600;
  const int64_t m = (s % 3600) / 60;
  s %= 60;
  if (h > 0) return absl::StrCat(h, "h", m, "m", s, "s");
  if (m > 0) return absl::StrCat(m, "m", s, "s");
  return absl::StrCat(s, "s");
}

int64_t RetryAfterSeconds(base::Nanos ns) {
  return std::max<int64_t>(1, (ns + kSecondNs - 1) / kSecondNs);
}

}  // namespace kvserve::server
