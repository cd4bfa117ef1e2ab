// The n-gram proposer and the adaptive switch-off (speculative/). Built into scheduler_test,
// the binary that exercises them through the scheduler too (one link fewer in CI).
#include <gtest/gtest.h>

#include <vector>

#include "speculative/acceptance_gate.h"
#include "speculative/ngram_proposer.h"

namespace kvserve::speculative {
namespace {

SpecParams Params(int lo, int hi) {
  SpecParams p;
  p.method = config::SpeculativeMethod::kNgram;
  p.ngram_min = lo;
  p.ngram_max = hi;
  return p;
}

std::vector<int32_t> Propose(const std::vector<int32_t>& tokens, SpecParams p, int k) {
  NgramProposer proposer;
  std::vector<int32_t> out = {99};  // cleared by Propose
  proposer.Propose(/*seq=*/0, tokens, p, DraftKv{}, k, out);
  return out;
}

TEST(NgramProposer, ContinuesTheMostRecentLongestMatch) {
  // Suffix "1 2 3" occurs at 0 (followed by 7 8) and at 5 (followed by 4 5): newest wins.
  const std::vector<int32_t> t = {1, 2, 3, 7, 8, 1, 2, 3, 4, 5, 9, 1, 2, 3};
  EXPECT_EQ(Propose(t, Params(1, 3), 2), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(Propose(t, Params(1, 3), 3), (std::vector<int32_t>{4, 5, 9}));
}

TEST(NgramProposer, LongerNgramsWinOverNewerShorterOnes) {
  // "5 6" matches at 0 (-> 1); the newer single "6" at 4 (-> 2) loses to the longer match.
  const std::vector<int32_t> t = {5, 6, 1, 0, 6, 2, 5, 6};
  EXPECT_EQ(Propose(t, Params(1, 2), 1), (std::vector<int32_t>{1}));
  // Only unigrams allowed: the newest "6" wins.
  EXPECT_EQ(Propose(t, Params(1, 1), 1), (std::vector<int32_t>{2}));
}

TEST(NgramProposer, NoMatchOrTooShortGivesNothing) {
  EXPECT_TRUE(Propose({1, 2, 3, 4}, Params(1, 3), 4).empty());
  EXPECT_TRUE(Propose({1, 1}, Params(2, 3), 4).empty());  // the suffix needs an earlier copy
  EXPECT_TRUE(Propose({1, 2, 1, 2}, Params(2, 2), 0).empty());
}

TEST(NgramProposer, ALoopShorterThanKIsRepeated) {
  // Period 2 ("4 5"): the continuation runs into its own guesses.
  EXPECT_EQ(Propose({9, 4, 5, 4, 5}, Params(2, 2), 5), (std::vector<int32_t>{4, 5, 4, 5, 4}));
}

TEST(AcceptanceGate, ClosesOnLowAcceptanceAndBacksOff) {
  AcceptanceGate g;
  EXPECT_TRUE(g.Open());
  int drafts = 0;
  while (g.closes() == 0) {
    ASSERT_TRUE(g.Open());
    g.Record(4, 0, 0.5);
    ++drafts;
  }
  EXPECT_LE(drafts, 4);
  // Closed for the first cool-down, then open again.
  for (int i = 0; i < AcceptanceGate::kFirstCooldown; ++i) EXPECT_FALSE(g.Open());
  EXPECT_TRUE(g.Open());
  while (g.closes() == 1) g.Record(4, 0, 0.5);
  int closed = 0;
  while (!g.Open()) ++closed;
  EXPECT_EQ(closed, 2 * AcceptanceGate::kFirstCooldown);  // doubled
}

TEST(AcceptanceGate, GoodDraftsKeepItOpen) {
  AcceptanceGate g;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(g.Open());
    g.Record(4, i % 2 ? 4 : 2, 0.3);
  }
  EXPECT_EQ(g.closes(), 0);
}

}  // namespace
}  // namespace kvserve::speculative
