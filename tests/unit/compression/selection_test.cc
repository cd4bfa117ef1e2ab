// Selection primitives: z-normalisation, GQA max, deterministic top-K.
#include "compression/selection.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace kvserve::compression {
namespace {

TEST(ZNormalize, GivesZeroMeanUnitPopulationStd) {
  std::vector<double> s = {1.0, 2.0, 3.0, 4.0};
  ZNormalize(s);
  double mean = 0, var = 0;
  for (double v : s) mean += v;
  mean /= 4;
  for (double v : s) var += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 1e-15);
  EXPECT_NEAR(var / 4, 1.0, 1e-12);                  // population, not sample, variance
  EXPECT_NEAR(s[0], -1.5 / std::sqrt(1.25), 1e-12);
}

TEST(ZNormalize, ClampsTheStdOfFlatRows) {
  std::vector<double> s = {5.0, 5.0, 5.0 + 1e-9};
  ZNormalize(s);
  // std ~ 4.7e-10 < 1e-6: divided by 1e-6 instead, so the values stay tiny and finite.
  for (double v : s) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_LT(std::abs(v), 1e-2);
  }
  std::vector<double> empty;
  ZNormalize(empty);  // no crash
}

TEST(MaxInto, TakesElementwiseMaximum) {
  std::vector<double> acc = {0.0, 5.0, -1.0};
  MaxInto(std::vector<double>{1.0, 2.0, -3.0}, acc);
  EXPECT_EQ(acc, (std::vector<double>{1.0, 5.0, -1.0}));
}

TEST(TopK, PicksLargestAscendingWithLowestIndexOnTies) {
  std::vector<int32_t> scratch, out(3);
  const std::vector<double> s = {1.0, 3.0, 3.0, 0.5, 3.0, 2.0};
  TopKAscending(s, 3, 100, out, scratch);
  EXPECT_EQ(out, (std::vector<int32_t>{101, 102, 104}));
  out.resize(2);
  TopKAscending(s, 2, 0, out, scratch);  // three-way tie at 3.0: the two lowest indices win
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2}));
}

TEST(TopK, GuardsWinAndNaNLoses) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> s = {nan, -inf, 0.0, inf, nan, -1.0};
  std::vector<int32_t> scratch, out(5);
  TopKAscending(s, 5, 0, out, scratch);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2, 3, 5}));  // the later NaN is the one dropped
  out.resize(4);
  TopKAscending(s, 4, 0, out, scratch);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3, 5}));  // -inf still beats NaN
}

TEST(TopK, AgreesWithFullSortOnRandomData) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> small(0, 20);  // many ties
  std::vector<int32_t> scratch;
  for (int trial = 0; trial < 50; ++trial) {
    const int m = 1 + trial * 7;
    std::vector<double> s(static_cast<size_t>(m));
    for (double& v : s) v = small(rng);
    const int k = m / 3;
    std::vector<int32_t> out(static_cast<size_t>(k));
    TopKAscending(s, k, 0, out, scratch);
    std::vector<int32_t> idx(static_cast<size_t>(m));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
    std::vector<int32_t> want(idx.begin(), idx.begin() + k);
    std::sort(want.begin(), want.end());
    ASSERT_EQ(out, want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace kvserve::compression
