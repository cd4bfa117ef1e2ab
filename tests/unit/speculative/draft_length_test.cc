// The adaptive draft length rule (speculative/draft_length.h): longest k with p^k >= theta(N),
// theta(N) = (c + g)N / (1 + cN), and the per-sequence acceptance estimate behind p.
#include "speculative/draft_length.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvserve::speculative {
namespace {

TEST(DraftLengthTest, SizeIsTheLongestDraftWhoseLastGuessStillPays) {
  constexpr double kCost = 0.1;
  for (int batch : {1, 2, 8, 32}) {
    const double theta = kCost * batch / (1.0 + kCost * batch);
    for (double p : {0.3, 0.6, 0.8, 0.9, 0.97}) {
      const int k = SizeDraft(p, 16, batch, kCost);
      ASSERT_GE(k, 1);
      ASSERT_LE(k, 16);
      if (k > 1) EXPECT_GE(std::pow(p, k), theta) << "p " << p << " batch " << batch;
      if (k < 16) EXPECT_LT(std::pow(p, k + 1), theta) << "p " << p << " batch " << batch;
    }
  }
  // Fewer guesses as the batch grows, more as acceptance grows.
  EXPECT_GT(SizeDraft(0.85, 16, 1, kCost), SizeDraft(0.85, 16, 8, kCost));
  EXPECT_GT(SizeDraft(0.97, 16, 8, kCost), SizeDraft(0.7, 16, 8, kCost));
  EXPECT_EQ(SizeDraft(0.85, 16, 1, kCost), 14);  // 0.85^14 = 0.103 >= 0.0909 > 0.85^15
  EXPECT_EQ(SizeDraft(0.85, 16, 8, kCost), 4);   // 0.85^4 = 0.522 >= 0.4444 > 0.85^5 = 0.4437
  // Capped by max_k; never below one guess; row_cost 0 switches sizing off.
  EXPECT_EQ(SizeDraft(1.0, 4, 64, kCost), 4);
  EXPECT_EQ(SizeDraft(0.05, 8, 8, kCost), 1);
  EXPECT_EQ(SizeDraft(0.05, 8, 8, 0.0), 8);
  EXPECT_EQ(SizeDraft(0.9, 1, 1, kCost), 1);
}

// A draft model's guesses cost its forward pass g too: theta = (c + g) N / (1 + c N), and a
// sequence whose first guess does not pay drafts none (kvs-tiny-draft: g = 0.3 of kvs-tiny).
TEST(DraftLengthTest, ADraftModelsPassIsChargedToEveryGuess) {
  constexpr double kCost = 0.1;
  constexpr double kPass = 0.3;
  // Batch 1: theta = 0.4 / 1.1 = 0.364; 0.75^3 = 0.42 pays, 0.75^4 = 0.32 does not.
  EXPECT_EQ(SizeDraft(0.75, 8, 1, kCost, kPass), 3);
  EXPECT_LT(SizeDraft(0.75, 8, 1, kCost, kPass), SizeDraft(0.75, 8, 1, kCost));
  // Batch 8: theta = 3.2 / 1.8 > 1: no guess pays for its pass, even a certain one.
  EXPECT_EQ(SizeDraft(1.0, 8, 8, kCost, kPass), 0);
  // Batch 2: theta = 0.8 / 1.2 = 0.667: a sequence below it drafts none, one above it drafts.
  EXPECT_EQ(SizeDraft(0.6, 8, 2, kCost, kPass), 0);
  EXPECT_EQ(SizeDraft(0.9, 8, 2, kCost, kPass), 3);  // 0.9^3 = 0.729 >= 0.667 > 0.9^4 = 0.656
  // A free proposer keeps the old rule (at least one guess).
  EXPECT_EQ(SizeDraft(0.05, 8, 8, kCost, 0.0), 1);
  DraftLength d;  // p = 0.75
  EXPECT_EQ(d.Size(8, 1, kCost, kPass), 3);
  EXPECT_EQ(d.Size(8, 8, kCost, kPass), 0);
}

TEST(DraftLengthTest, AcceptanceFollowsTheSequencesDrafts) {
  DraftLength d;
  EXPECT_DOUBLE_EQ(d.acceptance(), DraftLength::kPriorAccepted / DraftLength::kPriorTrials);
  // All guesses accepted, draft after draft: p climbs towards 1 and the draft grows to max_k.
  for (int i = 0; i < 30; ++i) d.Record(4, 4);
  EXPECT_GT(d.acceptance(), 0.99);
  EXPECT_EQ(d.Size(8, 8, 0.1), 8);
  // The first guess keeps failing: p falls towards 0 and one guess is drafted.
  for (int i = 0; i < 30; ++i) d.Record(4, 0);
  EXPECT_LT(d.acceptance(), 0.01);
  EXPECT_EQ(d.Size(8, 1, 0.1), 1);
  // Two of four accepted each time: two successes per rejection, p -> 2/3.
  for (int i = 0; i < 60; ++i) d.Record(4, 2);
  EXPECT_NEAR(d.acceptance(), 2.0 / 3.0, 1e-3);
  d.Record(0, 0);  // no draft: nothing learned
  EXPECT_NEAR(d.acceptance(), 2.0 / 3.0, 1e-3);
}

}  // namespace
}  // namespace kvserve::speculative
