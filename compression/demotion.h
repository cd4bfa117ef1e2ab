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

// Classes a tiered round can assign: full precision plus at most 7 tiers.
inline constexpr int kMaxClasses = 8;

struct DemotionRow {
  std::vector<int32_t> keep;                // full precision
  std::vector<std::vector<int32_t>> tiers;  // tiers[t]: demoted into tier t
  std::vector<int32_t> evicted;
};

// scores[j] belongs to slot base + j. Classes take min(size, what is left) candidates each,
// in rank order; `out` is overwritten.
void PlanDemotion(std::span<const double> scores, int64_t keep, std::span<const int64_t> tier_sizes, int64_t base,
                  DemotionRow& out, std::vector<int32_t>& scratch);

// A round over tokens some of which already sit in lower tiers (demotion_round.h). Classes:
// 0 = full precision, t = demotion tier t (1..T), -1 = evicted. A token never moves to a
// better class than the one it holds (floor[u]: its bits are gone), so in rank order each
// token takes the best class >= its floor that still has room:
//
//   rank order (as PlanDemotion) ──► class c = min { c >= floor[u] : taken[c] < sizes[c] }
//                                      or -1 when every such class is full
//
// With sizes from TierClassSizes every class ends exactly full, so all (layer, KV head) rows
// of a sequence keep the same count per class. `out` gets one class per candidate.
void PlanTieredRow(std::span<const double> scores, std::span<const int8_t> floor, std::span<const int64_t> sizes,
                   std::span<int8_t> out, std::vector<int32_t>& scratch);

// Class sizes of a tiered round, identical for every row: class 0 takes `pick` of the
// `num_full` full-precision candidates; tier t (1-based) then takes what it may hold,
// min(caps[t-1], the candidates still unplaced whose floor allows it), rounded down to whole
// blocks (a tier region of the block table holds only full blocks). held[t-1] = tokens tier t
// holds before the round. sizes: [caps.size() + 1].
void TierClassSizes(int64_t num_full, int64_t pick, std::span<const int64_t> held, std::span<const int64_t> caps,
                    int block_size, std::span<int64_t> sizes);

}  // namespace kvserve::compression
