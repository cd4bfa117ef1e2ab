// Sampler::Verify: speculative decoding's acceptance rule must leave the emitted token's
// distribution exactly the target's (greedy: exactly the argmax).
//
// The statistical test: 20000 draws per guessed token on a 6-token vocabulary, each with the
// per-token RNG a real sequence uses (TokenRng(seed, k, 0) for k = 0..N-1). Under exactness
// the Pearson statistic sum (O - E)^2 / E over the 5 tokens the filters keep follows chi^2 with
// 4 degrees of freedom, whose 99.9th percentile is 18.47: a correct sampler fails one seed in a
// thousand, and the seed here is fixed, so the test is deterministic. The bound has power: the
// classic bug (on rejection, resample from p without removing the guess) shifts the guessed
// token's share from p to p + (1 - p) p, an expected statistic of N * sum (q - p)^2 / p that is
// over 10x the bound for every guess tried (checked below).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "model/sampler.h"

namespace kvserve::model {
namespace {

constexpr int kVocab = 6;
constexpr int kDraws = 20000;
constexpr double kChiSquare4Df999 = 18.47;

TEST(SpeculativeSampling, GreedyAcceptsExactlyTheArgmaxAndDrawsNothing) {
  Sampler s(kVocab);
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.5f, 0.0f, 1.0f};
  SamplerRng rng(5);
  VerifyResult hit = s.Verify(logits, p, {}, {}, rng, 3);
  EXPECT_TRUE(hit.accepted);
  EXPECT_EQ(hit.sample.token, 3);
  VerifyResult miss = s.Verify(logits, p, {}, {}, rng, 1);
  EXPECT_FALSE(miss.accepted);
  EXPECT_EQ(miss.sample.token, 3);  // the correction is the target's own choice
  SamplerRng fresh(5);
  EXPECT_EQ(rng.Next(), fresh.Next());
  // Penalties apply to verification as to sampling: a repetition penalty flips the argmax.
  p.repetition_penalty = 10.0f;
  const std::vector<int32_t> output = {3};
  VerifyResult penalised = s.Verify(logits, p, {}, output, rng, 3);
  EXPECT_FALSE(penalised.accepted);
  EXPECT_EQ(penalised.sample.token, s.Sample(logits, p, {}, output, rng).token);
}

TEST(SpeculativeSampling, RejectionSamplingFollowsTheTargetDistribution) {
  Sampler s(kVocab);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 5;  // token 5 (the smallest logit) is filtered out: its target mass is 0
  p.logprobs = 0;
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 1.6f, 0.0f, -2.0f};
  // The target: softmax(logits / T) over the 5 kept tokens.
  std::array<double, kVocab> target{};
  double z = 0.0;
  for (int i = 0; i < 5; ++i) z += std::exp(static_cast<double>(logits[i]) / 0.8);
  for (int i = 0; i < 5; ++i) target[i] = std::exp(static_cast<double>(logits[i]) / 0.8) / z;

  for (int32_t guess : {3, 1, 2, 5}) {
    std::array<int, kVocab> counts{};
    int accepted = 0;
    for (int k = 0; k < kDraws; ++k) {
      SamplerRng rng = TokenRng(1234, k, 0);
      VerifyResult r = s.Verify(logits, p, {}, {}, rng, guess);
      ASSERT_GE(r.sample.token, 0);
      ASSERT_LT(r.sample.token, kVocab);
      ++counts[static_cast<size_t>(r.sample.token)];
      accepted += r.accepted ? 1 : 0;
      EXPECT_EQ(r.accepted, r.sample.token == guess);
      // The reported logprob is the raw row's, whichever way the token came.
      if (k == 0) {
        double lse = 0.0;
        for (float l : logits) lse += std::exp(static_cast<double>(l));
        EXPECT_NEAR(r.sample.logprob, logits[static_cast<size_t>(r.sample.token)] - std::log(lse),
                    1e-5);
      }
    }
    EXPECT_EQ(counts[5], 0) << "a filtered token was emitted (guess " << guess << ")";
    double chi2 = 0.0;
    double naive_expected = 0.0;
    for (int i = 0; i < 5; ++i) {
      const double e = target[i] * kDraws;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
      // The buggy rule's share of token i (resampling from p on rejection).
      const double pg = guess < 5 ? target[static_cast<size_t>(guess)] : 0.0;
      const double q = (i == guess ? pg : 0.0) + (1.0 - pg) * target[i];
      naive_expected += kDraws * (q - target[i]) * (q - target[i]) / target[i];
    }
    EXPECT_LT(chi2, kChiSquare4Df999) << "guess " << guess;
    if (guess < 5) EXPECT_GT(naive_expected, 10 * kChiSquare4Df999) << "guess " << guess;
    // Acceptance happens with probability p(guess) (binomial, 5 standard deviations).
    const double pg = guess < 5 ? target[static_cast<size_t>(guess)] : 0.0;
    EXPECT_NEAR(static_cast<double>(accepted) / kDraws, pg,
                5.0 * std::sqrt(pg * (1 - pg) / kDraws) + 1e-9);
  }
}

}  // namespace
}  // namespace kvserve::model
