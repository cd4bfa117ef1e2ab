#include "compression/demotion.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"

namespace kvserve::compression {

namespace {

// Candidate indices in rank order: higher score first; NaN below everything; ties to the lower
// index (a strict weak order, so the ranking is deterministic).
void RankOrder(std::span<const double> scores, std::vector<int32_t>& order) {
  order.resize(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const double sa = scores[static_cast<size_t>(a)];
    const double sb = scores[static_cast<size_t>(b)];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;  // the non-NaN one first
    if (!na && sa != sb) return sa > sb;
    return a < b;
  });
}

}  // namespace

void PlanTieredRow(std::span<const double> scores, std::span<const int8_t> floor, std::span<const int64_t> sizes,
                   std::span<int8_t> out, std::vector<int32_t>& scratch) {
  RankOrder(scores, scratch);
  const int classes = static_cast<int>(sizes.size());
  KVS_CHECK(classes <= kMaxClasses, "PlanTieredRow: ", classes, " classes");
  int64_t taken[kMaxClasses] = {};
  for (int32_t u : scratch) {
    int8_t c = floor[static_cast<size_t>(u)];
    while (c < classes && taken[c] >= sizes[static_cast<size_t>(c)]) ++c;
    if (c < classes) {
      ++taken[c];
      out[static_cast<size_t>(u)] = c;
    } else {
      out[static_cast<size_t>(u)] = -1;
    }
  }
}

void TierClassSizes(int64_t num_full, int64_t pick, std::span<const int64_t> held, std::span<const int64_t> caps,
                    int block_size, std::span<int64_t> sizes) {
  sizes[0] = std::min(pick, num_full);
  int64_t unplaced = num_full - sizes[0];
  for (size_t t = 0; t < caps.size(); ++t) {
    unplaced += held[t];
    const int64_t fit = std::min(std::max<int64_t>(0, caps[t]), unplaced);
    sizes[t + 1] = fit / block_size * block_size;
    unplaced -= sizes[t + 1];
  }
}

void PlanDemotion(std::span<const double> scores, int64_t keep, std::span<const int64_t> tier_sizes, int64_t base,
                  DemotionRow& out, std::vector<int32_t>& scratch) {
  const int64_t n = static_cast<int64_t>(scores.size());
  RankOrder(scores, scratch);
  auto take = [&](int64_t& at, int64_t count, std::vector<int32_t>& into) {
    const int64_t end = std::min(n, at + std::max<int64_t>(0, count));
    into.clear();
    for (int64_t r = at; r < end; ++r) into.push_back(static_cast<int32_t>(base + scratch[static_cast<size_t>(r)]));
    std::sort(into.begin(), into.end());
    at = end;
  };
  int64_t at = 0;
  take(at, keep, out.keep);
  out.tiers.resize(tier_sizes.size());
  for (size_t t = 0; t < tier_sizes.size(); ++t) take(at, tier_sizes[t], out.tiers[t]);
  take(at, n - at, out.evicted);
}

}  // namespace kvserve::compression
