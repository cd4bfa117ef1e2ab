// The virtual-query scorer against a straightforward float64 reference in the inverted-RoPE
// form (the paper's definition, which needs every key's position), on random data, at small
// and very large positions, with and without RoPE attention scaling, for every KV dtype.
#include "compression/triattention_scorer.h"

#include <gtest/gtest.h>

#include <complex>
#include <cstdio>

#include "compression_test_util.h"
#include "config/fields.h"

namespace kvserve::compression {
namespace {

using testing::InvFreq;
using testing::RandomStats;
using testing::ReferenceScore;
using testing::RopeF64;
using testing::TestPool;

struct Case {
  config::KvDtype dtype;
  int64_t t;
  double scaling;
};

class ScorerTest : public ::testing::TestWithParam<Case> {};

TEST_P(ScorerTest, MatchesInvertedRopeReference) {
  const Case c = GetParam();
  cache::KvLayout layout;
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 32;
  layout.block_size = 8;
  layout.dtype = c.dtype;
  const int q_heads = 6;  // group of 3
  const std::vector<float> inv_freq = InvFreq(layout.head_dim);
  TestPool pool(layout, 16, 5);
  const int64_t n = 100;
  const std::vector<int32_t> table = pool.Allocate(n);
  const TriAttentionStats stats =
      RandomStats(layout.num_layers, q_heads, layout.num_kv_heads, layout.head_dim, inv_freq, pool.rng(), c.scaling);

  // Cached keys = s * RoPE(pre-key, p) at random distinct past positions.
  std::uniform_int_distribution<int64_t> pd(0, c.t - 1);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (auto& p : positions) p = pd(pool.rng());
  std::vector<double> pre(static_cast<size_t>(layout.head_dim));
  for (int l = 0; l < layout.num_layers; ++l)
    for (int h = 0; h < layout.num_kv_heads; ++h)
      for (int64_t j = 0; j < n; ++j) {
        for (double& x : pre) x = nd(pool.rng());
        const std::vector<double> rot = RopeF64(pre, positions[j], inv_freq, c.scaling);
        std::vector<float> row(rot.begin(), rot.end());
        pool.Write(table, l, 0, h, j, row.data());
      }

  TriAttentionScorer scorer(stats);
  scorer.Prepare(c.t);
  std::vector<float> keys(static_cast<size_t>(n) * layout.head_dim);
  std::vector<double> out(static_cast<size_t>(3 * n));
  double worst = 0.0;
  for (int l = 0; l < layout.num_layers; ++l) {
    for (int kv = 0; kv < layout.num_kv_heads; ++kv) {
      pool.access().ReadRows(table, l, 0, kv, 0, n, keys.data());
      scorer.ScoreKvHead(l, kv, keys.data(), n, out.data());
      for (int g = 0; g < 3; ++g) {
        for (int64_t j = 0; j < n; ++j) {
          const std::vector<float> cached = pool.Read(table, l, 0, kv, j);  // dequantized
          const double ref = ReferenceScore(stats, l, kv * 3 + g, cached, positions[j], c.t);
          const double got = out[g * n + j];
          const double rel = std::abs(got - ref) / std::abs(ref);
          worst = std::max(worst, rel);
          ASSERT_LE(rel, 1e-6) << "layer " << l << " q head " << kv * 3 + g << " key " << j << ": " << got
                               << " vs reference " << ref;
        }
      }
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", worst);
  RecordProperty("worst_relative_error", buf);
}

INSTANTIATE_TEST_SUITE_P(
    Random, ScorerTest,
    ::testing::Values(Case{config::KvDtype::kFp32, 37, 1.0}, Case{config::KvDtype::kFp32, 5000, 1.0},
                      Case{config::KvDtype::kFp32, 200000, 1.0}, Case{config::KvDtype::kFp32, 5000, 1.3},
                      Case{config::KvDtype::kFp16, 5000, 1.0}, Case{config::KvDtype::kBf16, 70000, 1.0},
                      Case{config::KvDtype::kFp8E4M3, 5000, 1.0}, Case{config::KvDtype::kInt8, 123456, 1.0}),
    [](const auto& p) {
      return std::string(config::Name(p.param.dtype)) + "_t" + std::to_string(p.param.t) +
             (p.param.scaling != 1.0 ? "_scaled" : "");
    });

TEST(ScorerPhasors, AreMeansOfUnitPhasorsReducedModTwoPi) {
  std::mt19937 rng(3);
  const std::vector<float> inv_freq = InvFreq(16);
  const TriAttentionStats stats = RandomStats(1, 2, 1, 16, inv_freq, rng);
  TriAttentionScorer scorer(stats);
  const int64_t t = 987654;
  scorer.Prepare(t);
  for (int f = 0; f < 8; ++f) {
    std::complex<double> want = 0.0;
    for (int m = 0; m <= 16; ++m) {
      want += std::polar(1.0, static_cast<double>(t + (int64_t{1} << m)) * static_cast<double>(inv_freq[f]));
    }
    want /= 17.0;
    EXPECT_NEAR(scorer.phasor_re(f), want.real(), 1e-9);
    EXPECT_NEAR(scorer.phasor_im(f), want.imag(), 1e-9);
    EXPECT_LE(std::abs(std::complex<double>(scorer.phasor_re(f), scorer.phasor_im(f))), 1.0 + 1e-12);
  }
}

}  // namespace
}  // namespace kvserve::compression
