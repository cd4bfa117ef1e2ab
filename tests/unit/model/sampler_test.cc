#include "model/sampler.h"

#include <cmath>
#include <map>
#include <numeric>

#include "gtest/gtest.h"

namespace kvserve::model {
namespace {

std::vector<float> Logits(std::initializer_list<float> v) { return v; }

SamplingParams Random(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// Empirical token frequencies over `n` draws with one RNG stream.
std::map<int32_t, int> Histogram(Sampler& s, const std::vector<float>& logits, const SamplingParams& p, int n,
                                 uint64_t seed = 1) {
  SamplerRng rng(seed);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.Sample(logits, p, {}, {}, rng).token];
  return h;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(5);
  SamplerRng rng(0);
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(s.Sample(Logits({0.1f, 3.0f, -1.0f, 3.0f, 2.0f}), p, {}, {}, rng).token, 1);
  // Greedy draws nothing from the RNG: the stream is unchanged.
  SamplerRng fresh(0);
  EXPECT_EQ(rng.Next(), fresh.Next());
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  Sampler s(50);
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(static_cast<float>(i));
  auto run = [&](uint64_t seed, uint64_t stream) {
    SamplerRng rng(seed, stream);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits, Random(), {}, {}, rng).token);
    return out;
  };
  EXPECT_EQ(run(1234, 0), run(1234, 0));
  EXPECT_NE(run(1234, 0), run(1235, 0));
  EXPECT_NE(run(1234, 0), run(1234, 1));  // n > 1 samples of one request
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  Sampler s(4);
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = k/10
  const int n = 40000;
  auto h = Histogram(s, logits, Random(), n);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(h[k] / static_cast<double>(n), (k + 1) / 10.0, 0.01) << k;
}

TEST(Sampler, LowTemperatureSharpens) {
  Sampler s(4);
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  auto h = Histogram(s, logits, Random(0.25f), 20000);
  // p ∝ k^4: 256 / 354 for the top token.
  EXPECT_NEAR(h[3] / 20000.0, 256.0 / 354.0, 0.015);
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  Sampler s(6);
  SamplingParams p = Random();
  p.top_k = 2;
  auto h = Histogram(s, Logits({5.0f, 1.0f, 4.9f, 0.0f, 4.8f, -3.0f}), p, 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[0], 0);
  EXPECT_GT(h[2], 0);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  Sampler s(4);
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = Random();
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.8: tokens 0 and 1
  auto h = Histogram(s, logits, p, 20000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 20000.0, 0.5 / 0.8, 0.015);
  p.top_p = 0.01f;  // always at least the best token
  h = Histogram(s, logits, p, 100);
  EXPECT_EQ(h[0], 100);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  Sampler s(4);
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = Random();
  p.min_p = 0.25f;  // keep p >= 0.125: tokens 0, 1, 2
  auto h = Histogram(s, logits, p, 20000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.count(3), 0u);
}

TEST(Sampler, RepetitionPenaltyUsesPromptAndOutput) {
  Sampler s(4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  SamplerRng rng(0);
  const auto logits = Logits({3.0f, 2.0f, 1.0f, -1.0f});
  // Token 0 seen in the prompt: 3 / 2 = 1.5 < 2, so token 1 wins.
  const std::vector<int32_t> prompt = {0, 0};
  EXPECT_EQ(s.Sample(logits, p, prompt, {}, rng).token, 1);
  // Tokens 0 and 1 seen: 1.5, 1.0 vs 1.0 -> token 0.
  const std::vector<int32_t> out = {1};
  EXPECT_EQ(s.Sample(logits, p, prompt, out, rng).token, 0);
  // Negative logits are multiplied (pushed further down), never helped.
  const auto negative = Logits({-1.0f, -1.5f, -5.0f, -6.0f});
  EXPECT_EQ(s.Sample(negative, p, std::vector<int32_t>{0}, {}, rng).token, 1);
  // Scratch is clean afterwards: no penalty without history.
  EXPECT_EQ(s.Sample(logits, p, {}, {}, rng).token, 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesUseOutputOnly) {
  Sampler s(3);
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.5f;
  SamplerRng rng(0);
  const auto logits = Logits({2.0f, 1.0f, 0.0f});
  const std::vector<int32_t> prompt = {0, 0, 0, 0};
  EXPECT_EQ(s.Sample(logits, p, prompt, {}, rng).token, 0);  // prompt does not count
  // Token 0 generated twice: 2 - 2*0.4 - 0.5 = 0.7 < 1.
  const std::vector<int32_t> out = {0, 0};
  EXPECT_EQ(s.Sample(logits, p, prompt, out, rng).token, 1);
  // Token 0 once: 2 - 0.4 - 0.5 = 1.1 > 1.
  EXPECT_EQ(s.Sample(logits, p, prompt, std::vector<int32_t>{0}, rng).token, 0);
}

TEST(Sampler, StopTokensAreFlagged) {
  Sampler s(3);
  SamplingParams p;
  p.temperature = 0.0f;
  p.stop_token_ids = {2};
  SamplerRng rng(0);
  EXPECT_TRUE(s.Sample(Logits({0.0f, 1.0f, 5.0f}), p, {}, {}, rng).is_stop);
  EXPECT_FALSE(s.Sample(Logits({0.0f, 9.0f, 5.0f}), p, {}, {}, rng).is_stop);
}

TEST(Sampler, LogprobsOfRawDistribution) {
  Sampler s(4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 10.0f;  // changes the choice, not the reported distribution
  p.logprobs = 2;
  SamplerRng rng(0);
  const auto logits = Logits({1.0f, 3.0f, 2.0f, 0.0f});
  auto r = s.Sample(logits, p, std::vector<int32_t>{1}, {}, rng);
  const double lse = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0));
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 2.0 - lse, 1e-5);
  ASSERT_EQ(r.top_logprobs.size(), 2u);
  EXPECT_EQ(r.top_logprobs[0].token, 1);
  EXPECT_NEAR(r.top_logprobs[0].logprob, 3.0 - lse, 1e-5);
  EXPECT_EQ(r.top_logprobs[1].token, 2);
  p.logprobs.reset();
  EXPECT_TRUE(s.Sample(logits, p, {}, {}, rng).top_logprobs.empty());
}

TEST(Sampler, LogitBiasShiftsTheChoiceNotTheReportedLogprobs) {
  Sampler s(4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  SamplerRng rng(0);
  const auto logits = Logits({1.0f, 3.0f, 2.0f, 0.0f});
  EXPECT_EQ(s.Sample(logits, p, {}, {}, rng).token, 1);
  p.logit_bias = {{1, -100.0f}};  // bans the argmax
  EXPECT_EQ(s.Sample(logits, p, {}, {}, rng).token, 2);
  p.logit_bias = {{1, -100.0f}, {3, 2.5f}};  // 0 + 2.5 beats 2
  auto r = s.Sample(logits, p, {}, {}, rng);
  EXPECT_EQ(r.token, 3);
  const double lse = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0));
  EXPECT_NEAR(r.logprob, 0.0 - lse, 1e-5);  // raw distribution, as OpenAI reports
  // Sampling at temperature 1: a -100 bias leaves the token practically unreachable.
  p.temperature = 1.0f;
  p.logit_bias = {{1, -100.0f}};
  auto h = Histogram(s, logits, p, 2000);
  EXPECT_EQ(h.count(1), 0u);
  EXPECT_GT(h[2], h[0]);
}

TEST(Sampler, ValidateNamesTheField) {
  auto msg = [](const SamplingParams& p) { return std::string(p.Validate(10).message()); };
  SamplingParams p;
  EXPECT_TRUE(p.Validate(10).ok());
  p.temperature = -1.0f;
  EXPECT_NE(msg(p).find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0.0f;
  EXPECT_NE(msg(p).find("top_p"), std::string::npos);
  p = {};
  p.min_p = 2.0f;
  EXPECT_NE(msg(p).find("min_p"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(msg(p).find("top_k"), std::string::npos);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_NE(msg(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = 3.0f;
  EXPECT_NE(msg(p).find("frequency_penalty"), std::string::npos);
  p = {};
  p.stop_token_ids = {10};
  EXPECT_NE(msg(p).find("stop_token_ids"), std::string::npos);
  p = {};
  p.logprobs = 11;
  EXPECT_NE(msg(p).find("logprobs"), std::string::npos);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_NE(msg(p).find("logit_bias"), std::string::npos);
  p.logit_bias = {{3, 101.0f}};
  EXPECT_NE(msg(p).find("logit_bias"), std::string::npos);
  p.logit_bias.assign(kMaxLogitBias + 1, {0, 1.0f});
  EXPECT_NE(msg(p).find("logit_bias"), std::string::npos);
}

TEST(SamplerRng, UniformInRangeAndReproducible) {
  SamplerRng a(99), b(99);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = a.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u, b.Uniform());
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace kvserve::model

namespace kvserve::model {
namespace {

// model/sampler_rng.h is the one definition both backends use; pin its seeding scheme.
TEST(SamplerRngHeader, TokenSeedIsSplitMixOfTheTokenIndex) {
  for (uint64_t seed : {0ull, 7ull, 0x123456789abcdefull, ~0ull}) {
    for (int64_t k : {0, 1, 2, 63, 1000000}) {
      uint64_t state = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k);
      EXPECT_EQ(TokenSeed(seed, k), SplitMix64(state)) << seed << " " << k;
    }
  }
  EXPECT_NE(TokenSeed(1, 0), TokenSeed(1, 1));
  EXPECT_NE(TokenSeed(1, 0), TokenSeed(2, 0));
}

TEST(SamplerRngHeader, TokenRngIsTheSeededGeneratorOfThatToken) {
  for (int sample : {0, 1, 3}) {
    SamplerRng a = TokenRng(99, 5, sample);
    SamplerRng b(TokenSeed(99, 5), static_cast<uint64_t>(sample));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(a.Next(), b.Next());
  }
  SamplerRng s0 = TokenRng(99, 5, 0), s1 = TokenRng(99, 5, 1);
  EXPECT_NE(s0.Next(), s1.Next());  // samples of one request draw differently
}

}  // namespace
}  // namespace kvserve::model

namespace kvserve::model {
namespace {

// Structured outputs' mask: masked tokens are never drawn, greedy or not, whatever their
// logits; logprobs stay those of the raw row; ids past the mask are masked.
TEST(Sampler, AllowedMaskRestrictsTheDraw) {
  Sampler s(70);
  std::vector<float> logits(70, 0.0f);
  logits[5] = 9.0f;   // the favourite, masked
  logits[66] = 8.0f;  // beyond a one-word mask
  std::vector<uint64_t> mask = {(uint64_t{1} << 3) | (uint64_t{1} << 40)};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 0;
  SamplerRng rng(1);
  const SampleResult g = s.Sample(logits, greedy, {}, {}, rng, mask);
  EXPECT_EQ(g.token, 3);  // lowest id among the allowed ties
  const SampleResult raw = s.Sample(logits, greedy, {}, {}, rng);
  EXPECT_EQ(raw.token, 5);
  SamplingParams p = Random(1.0f);
  p.top_k = 50;
  for (int i = 0; i < 200; ++i) {
    SamplerRng r(static_cast<uint64_t>(i));
    const int32_t t = s.Sample(logits, p, {}, {}, r, mask).token;
    EXPECT_TRUE(t == 3 || t == 40) << t;
  }
  // The reported logprob is the raw model's (token 3 under the unmasked softmax).
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - 9.0);
  EXPECT_NEAR(g.logprob, static_cast<float>(0.0 - 9.0 - std::log(sum)), 1e-4);
}

}  // namespace
}  // namespace kvserve::model

namespace kvserve::model {
namespace {

// vLLM's min_tokens, allowed_token_ids and bad_words are masks before sampling.
TEST(SamplerMasks, MinTokensMasksEndTokensUntilReached) {
  Sampler s(4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.min_tokens = 2;
  p.min_tokens_banned = {3};
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, 9.0f};  // 3 (say EOS) is the argmax
  SamplerRng rng(0);
  const std::vector<int32_t> one = {1};
  const std::vector<int32_t> two = {1, 1};
  EXPECT_EQ(s.Sample(logits, p, {}, {}, rng).token, 1);
  EXPECT_EQ(s.Sample(logits, p, {}, one, rng).token, 1);
  EXPECT_EQ(s.Sample(logits, p, {}, two, rng).token, 3);  // reached: EOS may end it
  // Sampling (not greedy) never draws a masked token either.
  p.temperature = 1.0f;
  for (const auto& [token, count] : Histogram(s, logits, p, 2000)) EXPECT_NE(token, 3) << count;
}

TEST(SamplerMasks, AllowedTokenIdsAreTheOnlyCandidates) {
  Sampler s(6);
  SamplingParams p;
  p.allowed_token_ids = {1, 4};
  const std::vector<float> logits = {5.0f, 0.0f, 5.0f, 5.0f, 0.5f, 5.0f};
  const auto h = Histogram(s, logits, p, 4000);
  ASSERT_EQ(h.size(), 2u);
  // Renormalised over the two: p(4) = e^0.5 / (1 + e^0.5).
  EXPECT_NEAR(h.at(4) / 4000.0, std::exp(0.5) / (1.0 + std::exp(0.5)), 0.03);
  p.temperature = 0.0f;
  SamplerRng rng(0);
  EXPECT_EQ(s.Sample(logits, p, {}, {}, rng).token, 4);
  // The mask leaves no trace: the next call without it sees every token again.
  EXPECT_EQ(s.Sample(logits, Random(0.0f), {}, {}, rng).token, 0);
}

TEST(SamplerMasks, BadWordsBanTheLastTokenAfterTheirPrefix) {
  Sampler s(5);
  SamplingParams p;
  p.temperature = 0.0f;
  p.bad_words = {{4}, {1, 2, 3}};
  const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 8.0f, 9.0f};
  SamplerRng rng(0);
  // 4 is always banned; 3 only after ... 1, 2.
  EXPECT_EQ(s.Sample(logits, p, {}, std::vector<int32_t>{2}, rng).token, 3);
  EXPECT_EQ(s.Sample(logits, p, {}, std::vector<int32_t>{0, 1, 2}, rng).token, 2);
  EXPECT_EQ(s.Sample(logits, p, {}, std::vector<int32_t>{1, 2, 0}, rng).token, 3);
  // The prefix counts in the output only (vLLM), not the prompt.
  EXPECT_EQ(s.Sample(logits, p, std::vector<int32_t>{1, 2}, {}, rng).token, 3);
  EXPECT_TRUE(p.Validate(5).ok());
  p.bad_words.push_back({7});
  EXPECT_FALSE(p.Validate(5).ok());
}

}  // namespace
}  // namespace kvserve::model
