// Importance-aware mixed precision (issue 18): how one (layer, KV head) row's candidates
// split between full precision, lower-precision tiers and eviction, by their scores (from
// any scorer: TriAttention, SnapKV, H2O). The most important stay exact, the next ones lose
// bits, only the least important are dropped:
//
//   candidates ranked by score, descending (ties -> lower slot first, NaN last, as
//   TopKAscending ranks them):
//
//   rank:  0 ........ keep-1 | keep ... +tiers[0]-1 | ... +tiers[1]-1 | ... | rest
//          [ full precision ] [ tier 0 (e.g. int8) ] [ tier 1 (int4) ]     [ evicted ]
//
// Sinks, the recent window and a protected prompt are never candidates (the policies keep
// them out of [lo, scored_end), kv_compact.h), so they stay at full precision. Every class
// comes back in ascending slot order (the order compaction moves rows in).
//
// Pure function of its arguments; `scratch` is reused between calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::compression {

struct DemotionRow {
  std::vector<int32_t> keep;                // full precision
  std::vector<std::vector<int32_t>> tiers;  // tiers[t]: demoted into tier t
  std::vector<int32_t> evicted;
};

// scores[j] belongs to slot base + j. Classes take min(size, what is left) candidates each,
// in rank order; `out` is overwritten.
void PlanDemotion(std::span<const double> scores, int64_t keep, std::span<const int64_t> tier_sizes, int64_t base,
                  DemotionRow& out, std::vector<int32_t>& scratch);

}  // namespace kvserve::compression
