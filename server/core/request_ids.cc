#include "server/core/request_ids.h"

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::server {

std::string RequestIdGenerator::Next(std::string_view prefix) {
  // splitmix64's finaliser is a bijection on 64-bit values, so distinct counters give
  // distinct ids for a fixed seed.
  uint64_t x = counter_.fetch_add(1, std::memory_order_relaxed) + seed_;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return absl::StrCat(base::AsAbsl(prefix), absl::Hex(x, absl::kZeroPad16));
}

}  // namespace kvserve::server
