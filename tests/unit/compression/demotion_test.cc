// compression/demotion: the ranking splits candidates into full precision, lower tiers and
// eviction strictly by score — demotion and eviction take exactly the lowest-score tokens —
// and the full-precision set is the one TopKAscending keeps.
#include "compression/demotion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "compression/selection.h"

namespace kvserve::compression {
namespace {

// a ranks above b: higher score, NaN lowest, ties to the lower slot.
bool Above(double sa, int32_t a, double sb, int32_t b) {
  if (std::isnan(sa) != std::isnan(sb)) return std::isnan(sb);
  if (!std::isnan(sa) && sa != sb) return sa > sb;
  return a < b;
}

TEST(PlanDemotion, ClassesFollowTheScoreRanking) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> coarse(0, 40);  // many ties
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 1 + trial * 7;
    const int64_t base = 5;
    std::vector<double> scores(static_cast<size_t>(n));
    for (auto& s : scores) s = coarse(rng) * 0.25;
    if (n > 3) scores[2] = std::numeric_limits<double>::quiet_NaN();
    const int64_t keep = n / 4, t0 = n / 3, t1 = n / 5;
    const int64_t sizes[] = {t0, t1};
    DemotionRow row;
    std::vector<int32_t> scratch;
    PlanDemotion(scores, keep, sizes, base, row, scratch);
    ASSERT_EQ(row.tiers.size(), 2u);
    EXPECT_EQ(static_cast<int64_t>(row.keep.size()), keep);
    EXPECT_EQ(static_cast<int64_t>(row.tiers[0].size()), t0);
    EXPECT_EQ(static_cast<int64_t>(row.tiers[1].size()), t1);
    EXPECT_EQ(static_cast<int64_t>(row.evicted.size()), n - keep - t0 - t1);
    const std::vector<std::vector<int32_t>*> classes = {&row.keep, &row.tiers[0], &row.tiers[1], &row.evicted};
    std::set<int32_t> all;
    for (const auto* c : classes) {
      EXPECT_TRUE(std::is_sorted(c->begin(), c->end()));
      all.insert(c->begin(), c->end());
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), n) << "classes overlap or miss a slot";
    // Every member of a class ranks above every member of every later class.
    for (size_t i = 0; i < classes.size(); ++i) {
      for (size_t j = i + 1; j < classes.size(); ++j) {
        for (int32_t a : *classes[i]) {
          for (int32_t b : *classes[j]) {
            ASSERT_TRUE(Above(scores[a - base], a, scores[b - base], b))
                << "trial " << trial << ": slot " << a << " (class " << i << ") vs " << b << " (class " << j << ")";
          }
        }
      }
    }
    // Full precision is exactly the top-K selection the eviction-only policies make.
    std::vector<int32_t> top(static_cast<size_t>(keep));
    TopKAscending(scores, keep, base, top, scratch);
    EXPECT_EQ(row.keep, top);
  }
}

TEST(PlanDemotion, EvictsAndDemotesTheLowestScores) {
  //             slot: 0    1    2    3    4    5    6    7
  const std::vector<double> s = {0.9, 0.1, 0.5, 0.7, 0.2, 0.8, 0.3, 0.6};
  const int64_t sizes[] = {2, 2};  // int8 tier, int4 tier
  DemotionRow row;
  std::vector<int32_t> scratch;
  PlanDemotion(s, 2, sizes, 100, row, scratch);
  EXPECT_EQ(row.keep, (std::vector<int32_t>{100, 105}));       // 0.9, 0.8
  EXPECT_EQ(row.tiers[0], (std::vector<int32_t>{103, 107}));   // 0.7, 0.6
  EXPECT_EQ(row.tiers[1], (std::vector<int32_t>{102, 106}));   // 0.5, 0.3
  EXPECT_EQ(row.evicted, (std::vector<int32_t>{101, 104}));    // 0.1, 0.2: the two lowest
  // Tiers larger than what is left take what is left; nothing is evicted.
  const int64_t big[] = {3, 100};
  PlanDemotion(s, 2, big, 0, row, scratch);
  EXPECT_EQ(row.tiers[0].size(), 3u);
  EXPECT_EQ(row.tiers[1].size(), 3u);
  EXPECT_TRUE(row.evicted.empty());
}

TEST(PlanTieredRow, TokensTakeTheBestClassTheirFloorAllowsInRankOrder) {
  //             u:   0    1    2    3    4    5    6    7
  const std::vector<double> s = {0.9, 0.1, 0.5, 0.7, 0.2, 0.8, 0.3, 0.6};
  // u 0, 1 sit in tier 1 already, u 2 in tier 2; the rest are full-precision candidates.
  const std::vector<int8_t> floor = {1, 1, 2, 0, 0, 0, 0, 0};
  const int64_t sizes[] = {2, 2, 2};  // full, tier 1, tier 2; 2 evicted
  std::vector<int8_t> cls(8);
  std::vector<int32_t> scratch;
  PlanTieredRow(s, floor, sizes, cls, scratch);
  // Rank: 0 (.9, floor 1 -> tier 1), 5 (.8 -> full), 3 (.7 -> full), 7 (.6 -> full is full,
  // tier 1), 2 (.5, floor 2 -> tier 2), 6 (.3 -> tier 2), 4 (.2) and 1 (.1) evicted.
  EXPECT_EQ(cls, (std::vector<int8_t>{1, -1, 2, 0, -1, 0, 2, 1}));
  // Every class ends exactly full and no token rises above its floor.
  int64_t count[3] = {};
  for (size_t u = 0; u < cls.size(); ++u) {
    if (cls[u] >= 0) {
      ++count[cls[u]];
      EXPECT_GE(cls[u], floor[u]);
    }
  }
  EXPECT_EQ(count[0], 2);
  EXPECT_EQ(count[1], 2);
  EXPECT_EQ(count[2], 2);
}

TEST(TierClassSizes, FillTiersInOrderWithWholeBlocks) {
  int64_t sizes[3];
  // 20 full candidates, 12 kept: 8 left; tier 1 (cap 8) takes them; tier 2 has nothing.
  const int64_t held0[] = {0, 0}, caps[] = {8, 10};
  TierClassSizes(20, 12, held0, caps, 4, sizes);
  EXPECT_EQ(sizes[0], 12);
  EXPECT_EQ(sizes[1], 8);
  EXPECT_EQ(sizes[2], 0);
  // Tiers full from before: 8 + 8 more candidates for tier 1 (8), then 8 + 8 for tier 2:
  // its cap of 10 rounds down to 8 (two blocks of 4).
  const int64_t held1[] = {8, 8};
  TierClassSizes(20, 12, held1, caps, 4, sizes);
  EXPECT_EQ(sizes[1], 8);
  EXPECT_EQ(sizes[2], 8);
  // Fewer candidates than a block: nothing is demoted, the round only evicts.
  TierClassSizes(14, 12, held0, caps, 4, sizes);
  EXPECT_EQ(sizes[1], 0);
  EXPECT_EQ(sizes[2], 0);
}

}  // namespace
}  // namespace kvserve::compression
