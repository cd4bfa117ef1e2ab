// Request ids such as "cmpl-3f9c0a71d2e4b658": unique within the process (a bijective mix
// of a counter keyed by a seed drawn once at start-up), unguessable enough that clients do
// not rely on their order, and cheap (no lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::server {

class RequestIdGenerator {
 public:
  explicit RequestIdGenerator(uint64_t seed) : seed_(seed) {}
  std::string Next(std::string_view prefix);

 private:
  const uint64_t seed_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace kvserve::server
