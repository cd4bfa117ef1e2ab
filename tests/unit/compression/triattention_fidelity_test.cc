// TriAttention as the paper runs it (issue 15), each rule against a direct reference
// computation: cross-layer selection (z-score per query head, max over the KV group, mean
// over layers, one set per KV head), no rounds during prefill unless asked, sinks + recent
// window guards with an unprotected prompt, the future-offset cap, the scorer's RoPE table,
// the score ablations, the budget-scaled slack and streamingllm at the budget.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numeric>
#include <set>

#include "compression/policy_factory.h"
#include "compression/triattention_policy.h"
#include "compression/triattention_scorer.h"
#include "compression_test_util.h"

namespace kvserve::compression {
namespace {

using config::CompressionPolicyKind;
using testing::InvFreq;
using testing::MakeContext;
using testing::RandomStats;
using testing::TestPool;
using testing::TestSeq;
using testing::TickClock;

constexpr int kQHeads = 4;

cache::KvLayout Layout() {
  cache::KvLayout l;
  l.num_layers = 3;
  l.num_kv_heads = 2;
  l.head_dim = 16;
  l.block_size = 4;
  l.dtype = config::KvDtype::kFp32;
  return l;
}

// A direct reference score of one key: inverse-RoPE the cached key to its pre-RoPE form k at
// position p, then for each offset delta in {2^0 .. 2^(M-1)}:
//   trig(delta) = sum_f s^2 Re(A conj(k) e^{i w (t + delta - p)}),  norm = sum_f s^2 max(0, M - |A|) |k|
// pooled by mean or max over delta, with either term optionally dropped.
double RefScore(const TriAttentionStats& st, std::span<const float> w_table, int layer, int head,
                std::span<const float> cached, int64_t p, int64_t t, int offsets, TriScoreTerms terms,
                TriOffsetPool pool) {
  const int F = st.num_freqs();
  const double s = st.attention_scaling;
  std::vector<double> trig(static_cast<size_t>(offsets), 0.0);
  double norm = 0.0;
  for (int f = 0; f < F; ++f) {
    const double w = w_table[f];
    const std::complex<double> kappa(cached[f] / s, cached[f + F] / s);
    const std::complex<double> k = kappa * std::polar(1.0, -static_cast<double>(p) * w);
    const FreqStat& e = st.at(layer, head, f);
    const std::complex<double> a(e.a_re, e.a_im);
    for (int m = 0; m < offsets; ++m) {
      const double dist = static_cast<double>(t + (int64_t{1} << m) - p);
      trig[m] += s * s * std::real(a * std::conj(k) * std::polar(1.0, w * dist));
    }
    norm += s * s * std::max(0.0, e.m - std::abs(a)) * std::abs(k);
  }
  double tr = 0.0;
  if (pool == TriOffsetPool::kMean) {
    for (double v : trig) tr += v;
    tr /= offsets;
  } else {
    tr = *std::max_element(trig.begin(), trig.end());
  }
  if (terms == TriScoreTerms::kTrigOnly) return tr;
  if (terms == TriScoreTerms::kNormOnly) return norm;
  return tr + norm;
}

// z-normalised, group-max pooled reference R_l[j] over slots [lo, end) of (layer, kv).
std::vector<double> RefPooled(const TestSeq& seq, const TriAttentionStats& st, std::span<const float> w_table,
                              int layer, int kv, int64_t lo, int64_t end, int offsets) {
  const int group = st.num_q_heads / st.num_kv_heads;
  const auto pos = seq.slots.positions(layer, kv);
  std::vector<double> best(static_cast<size_t>(end - lo), -1e300);
  for (int g = 0; g < group; ++g) {
    std::vector<double> s;
    for (int64_t j = lo; j < end; ++j) {
      s.push_back(RefScore(st, w_table, layer, kv * group + g, seq.pool->Read(seq.table, layer, 0, kv, j), pos[j],
                           seq.next_position, offsets, TriScoreTerms::kBoth, TriOffsetPool::kMean));
    }
    double mean = 0, var = 0;
    for (double v : s) mean += v;
    mean /= static_cast<double>(s.size());
    for (double v : s) var += (v - mean) * (v - mean);
    const double sd = std::max(std::sqrt(var / static_cast<double>(s.size())), 1e-6);
    for (size_t j = 0; j < s.size(); ++j) best[j] = std::max(best[j], (s[j] - mean) / sd);
  }
  return best;
}

// Top k of r (ties to the lower index), ascending, offset by lo.
std::vector<int32_t> RefTopK(const std::vector<double>& r, int64_t k, int64_t lo) {
  std::vector<int32_t> idx(r.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return r[a] > r[b]; });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  for (int32_t& i : idx) i += static_cast<int32_t>(lo);
  return idx;
}

struct Harness {
  Harness() : layout(Layout()), inv_freq(InvFreq(layout.head_dim)), pool(layout, 96, 17) {
    std::mt19937 rng(5);
    stats = RandomStats(layout.num_layers, kQHeads, layout.num_kv_heads, layout.head_dim, inv_freq, rng);
  }
  std::unique_ptr<CompressionPolicy> Make(const PolicyParams& p, int64_t max_context = 0) {
    PolicyContext c = MakeContext(layout, kQHeads, inv_freq, &stats, &clock);
    c.max_context = max_context;
    auto r = CreatePolicy(p, c);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  TestSeq NewSeq(const CompressionPolicy& policy, int64_t slots) {
    TestSeq s;
    s.pool = &pool;
    s.table = pool.Allocate(slots);
    s.slots = policy.NewSlotState();
    return s;
  }
  std::vector<int32_t> Positions(const TestSeq& s, int layer, int kv) const {
    const auto p = s.slots.positions(layer, kv);
    return {p.begin(), p.end()};
  }
  cache::KvLayout layout;
  std::vector<float> inv_freq;
  TestPool pool;
  TickClock clock;
  TriAttentionStats stats;
};

PolicyParams Tri(int64_t budget, int64_t prompt, bool protect) {
  PolicyParams p;
  p.kind = CompressionPolicyKind::kTriAttention;
  p.budget = budget;
  p.divide_length = 8;
  p.prompt_len = prompt;
  p.protect_prompt = protect;
  return p;
}

TEST(TriAttentionFidelity, CrossLayerIsTheDefaultAndMatchesTheDirectReference) {
  Harness h;
  const int64_t prompt = 5, budget = 20;
  PolicyParams p = Tri(budget, prompt, true);
  EXPECT_EQ(p.tri_selection, TriSelection::kCrossLayer) << "the paper's default";
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(31);
  const int64_t n = seq.slots.size();
  const int offsets = kTriAttentionNumOffsets;  // max_context unknown: all 17
  std::vector<std::vector<int32_t>> want(static_cast<size_t>(h.layout.num_kv_heads));
  std::vector<std::vector<int32_t>> before(static_cast<size_t>(h.layout.num_kv_heads));
  for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
    std::vector<double> mean(static_cast<size_t>(n - prompt), 0.0);
    for (int l = 0; l < h.layout.num_layers; ++l) {
      const std::vector<double> r = RefPooled(seq, h.stats, h.inv_freq, l, kv, prompt, n, offsets);
      for (size_t j = 0; j < r.size(); ++j) mean[j] += r[j] / h.layout.num_layers;
    }
    want[kv] = RefTopK(mean, budget - prompt, prompt);
    before[kv] = h.Positions(seq, 0, kv);
  }
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(seq.slots.size(), budget);
  for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
    std::vector<int32_t> expect(before[kv].begin(), before[kv].begin() + prompt);
    for (int32_t slot : want[kv]) expect.push_back(before[kv][slot]);
    for (int l = 0; l < h.layout.num_layers; ++l) {
      EXPECT_EQ(h.Positions(seq, l, kv), expect) << "layer " << l << " KV head " << kv
                                                 << ": every layer keeps the KV head's one set";
    }
  }
  // One set per KV head in every layer: a position gone from a KV head is gone from all its
  // layers, so the audit counts n - B per KV head with distinct sets at most.
  EXPECT_GE(static_cast<int64_t>(r->evicted_positions.size()), 0);
  EXPECT_LE(static_cast<int64_t>(r->evicted_positions.size()), n - budget);
}

TEST(TriAttentionFidelity, PerLayerOptionKeepsOneSetPerLayerAndHead) {
  Harness h;
  const int64_t prompt = 5, budget = 20;
  PolicyParams p = Tri(budget, prompt, true);
  p.tri_selection = TriSelection::kPerLayer;
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(31);
  const int64_t n = seq.slots.size();
  std::vector<std::vector<int32_t>> expect;
  for (int l = 0; l < h.layout.num_layers; ++l)
    for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
      const auto before = h.Positions(seq, l, kv);
      std::vector<int32_t> e(before.begin(), before.begin() + prompt);
      for (int32_t slot : RefTopK(RefPooled(seq, h.stats, h.inv_freq, l, kv, prompt, n, 17), budget - prompt, prompt)) {
        e.push_back(before[slot]);
      }
      expect.push_back(e);
    }
  ASSERT_TRUE(policy->Run(seq.Input()).ok());
  bool layers_differ = false;
  for (int l = 0; l < h.layout.num_layers; ++l)
    for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
      EXPECT_EQ(h.Positions(seq, l, kv), expect[l * h.layout.num_kv_heads + kv]) << "layer " << l << " kv " << kv;
      layers_differ |= h.Positions(seq, l, kv) != h.Positions(seq, 0, kv);
    }
  EXPECT_TRUE(layers_differ) << "random stats should give layers different sets";
}

TEST(TriAttentionFidelity, NoRoundsDuringPrefillUnlessAsked) {
  Harness h;
  PolicyParams p = Tri(16, 100, false);  // a 100-token prompt, fed in chunks
  auto policy = h.Make(p);
  for (int64_t next : {16, 40, 64, 99, 100}) {
    EXPECT_FALSE(policy->Due(next, next)) << "prefill chunk ending at " << next << " (or its last step)";
  }
  EXPECT_TRUE(policy->Due(101, 101)) << "the first decode step";
  p.compress_prefill = true;
  auto eager = h.Make(p);
  EXPECT_TRUE(eager->Due(40, 40)) << "compress_prefill: rounds between chunks";
  EXPECT_FALSE(eager->Due(16 + 8 - 1, 23));
}

TEST(TriAttentionFidelity, UnprotectedPromptKeepsSinksAndRecentWindowAndScoresTheRest) {
  Harness h;
  const int64_t budget = 40;
  PolicyParams p = Tri(budget, 30, /*protect=*/false);  // sinks 4, window -1: default
  ASSERT_EQ(p.sinks, 4);
  const int64_t window = RecentWindow(p);
  EXPECT_EQ(window, 18) << "the default 128, capped at half of B - sinks";
  EXPECT_EQ(FirstEvictableSlot(p), 4);
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, 64);
  seq.Append(52);
  const int64_t n = seq.slots.size();
  std::vector<std::vector<int32_t>> expect;
  for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
    std::vector<double> mean(static_cast<size_t>(n - window - 4), 0.0);
    for (int l = 0; l < h.layout.num_layers; ++l) {
      const auto r = RefPooled(seq, h.stats, h.inv_freq, l, kv, 4, n - window, 17);
      for (size_t j = 0; j < r.size(); ++j) mean[j] += r[j] / h.layout.num_layers;
    }
    std::vector<int32_t> e = {0, 1, 2, 3};
    for (int32_t slot : RefTopK(mean, budget - 4 - window, 4)) e.push_back(slot);  // positions == slots here
    for (int64_t i = n - window; i < n; ++i) e.push_back(static_cast<int32_t>(i));
    expect.push_back(e);
  }
  ASSERT_TRUE(policy->Run(seq.Input()).ok());
  for (int l = 0; l < h.layout.num_layers; ++l)
    for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) EXPECT_EQ(h.Positions(seq, l, kv), expect[kv]);

  // A request may switch both guards off.
  p.sinks = 0;
  p.window = 0;
  EXPECT_EQ(FirstEvictableSlot(p), 0);
  EXPECT_EQ(RecentWindow(p), 0);
  // And an explicit window is honoured (it must leave room to select).
  p.window = 30;
  EXPECT_EQ(RecentWindow(p), 30);
  p.window = 40;
  EXPECT_FALSE(ValidateParams(p).ok());
}

TEST(TriAttentionFidelity, FutureOffsetsAreCappedAtTheModelContext) {
  EXPECT_EQ(NumOffsetsFor(0), 17);
  EXPECT_EQ(NumOffsetsFor(1), 1);
  EXPECT_EQ(NumOffsetsFor(2047), 11);
  EXPECT_EQ(NumOffsetsFor(2048), 12);  // 2^0 .. 2^11
  EXPECT_EQ(NumOffsetsFor(65536), 17);
  EXPECT_EQ(NumOffsetsFor(1 << 20), 21) << "configurable past the reference's 2^16";

  Harness h;
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 9, t = 700;
  std::vector<float> keys(static_cast<size_t>(n) * h.layout.head_dim);
  for (float& x : keys) x = nd(rng);
  for (int offsets : {1, 12, 17}) {
    TriScorerOptions o;
    o.num_offsets = offsets;
    TriAttentionScorer scorer(h.stats, h.inv_freq, o);
    scorer.Prepare(t);
    std::vector<double> out(static_cast<size_t>(2 * n));
    scorer.ScoreKvHead(1, 1, keys.data(), n, out.data());
    for (int g = 0; g < 2; ++g)
      for (int64_t j = 0; j < n; ++j) {
        // Keys at position 0 are unrotated: cached == pre-RoPE.
        const std::span<const float> k(keys.data() + j * h.layout.head_dim, static_cast<size_t>(h.layout.head_dim));
        const double ref = RefScore(h.stats, h.inv_freq, 1, 2 + g, k, 0, t, offsets, TriScoreTerms::kBoth,
                                    TriOffsetPool::kMean);
        EXPECT_NEAR(out[g * n + j], ref, 1e-9 * std::max(1.0, std::abs(ref))) << offsets << " offsets";
      }
  }
  // The policy takes its cap from the model's context unless the request sets one.
  PolicyParams p = Tri(8, 0, true);
  auto capped = h.Make(p, /*max_context=*/2048);
  ASSERT_NE(capped, nullptr);
}

TEST(TriAttentionFidelity, ScorerUsesTheModelsRopeTableAndTheAblations) {
  Harness h;
  // A stats file whose RoPE table is not the model's: the model's must win.
  TriAttentionStats other = h.stats;
  for (double& w : other.inv_freq) w *= 1.5;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 7, t = 333;
  std::vector<float> keys(static_cast<size_t>(n) * h.layout.head_dim);
  for (float& x : keys) x = nd(rng);
  for (TriScoreTerms terms : {TriScoreTerms::kBoth, TriScoreTerms::kTrigOnly, TriScoreTerms::kNormOnly})
    for (TriOffsetPool pool : {TriOffsetPool::kMean, TriOffsetPool::kMax}) {
      TriScorerOptions o;
      o.num_offsets = 12;
      o.terms = terms;
      o.offset_pool = pool;
      TriAttentionScorer scorer(other, h.inv_freq, o);
      scorer.Prepare(t);
      std::vector<double> out(static_cast<size_t>(2 * n));
      scorer.ScoreKvHead(2, 0, keys.data(), n, out.data());
      for (int g = 0; g < 2; ++g)
        for (int64_t j = 0; j < n; ++j) {
          const std::span<const float> k(keys.data() + j * h.layout.head_dim, static_cast<size_t>(h.layout.head_dim));
          const double ref = RefScore(other, h.inv_freq, 2, g, k, 0, t, 12, terms, pool);
          EXPECT_NEAR(out[g * n + j], ref, 1e-9 * std::max(1.0, std::abs(ref)))
              << "terms " << static_cast<int>(terms) << " pool " << static_cast<int>(pool);
        }
    }
}

TEST(TriAttentionFidelity, DefaultSlackScalesWithTheBudget) {
  PolicyParams p = Tri(128, 0, true);
  p.divide_length = 0;
  EXPECT_EQ(SlackLength(p), 32);
  for (int64_t b : {8, 64, 128, 256, 512, 1024, 2048, 8192}) {
    p.budget = b;
    const int64_t peak = b + SlackLength(p);
    EXPECT_LE(peak, b + b / 4) << "budget " << b;
    EXPECT_LE(SlackLength(p), 128);
    EXPECT_GE(SlackLength(p), 1);
  }
  p.budget = 2;
  EXPECT_EQ(SlackLength(p), 1);
  p.divide_length = 50;
  EXPECT_EQ(SlackLength(p), 50) << "an explicit divide_length wins";
  config::CompressionConfig c;
  EXPECT_EQ(ParamsFromConfig(c, CompressionPolicyKind::kTriAttention, 0).divide_length, 0)
      << "the server default is the budget-scaled slack";

  // A round is due exactly at B + slack.
  Harness h;
  PolicyParams q = Tri(64, 0, true);
  q.divide_length = 0;
  auto policy = h.Make(q);
  EXPECT_FALSE(policy->Due(79, 79));
  EXPECT_TRUE(policy->Due(80, 80));
}

TEST(TriAttentionFidelity, StreamingLlmHonoursTheBudget) {
  Harness h;
  PolicyParams p;
  p.kind = CompressionPolicyKind::kStreamingLlm;
  p.budget = 24;
  p.divide_length = 8;
  p.protect_prompt = false;
  p.prompt_len = 2;
  auto policy = h.Make(p);
  EXPECT_EQ(policy->target_length(), 24);
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(32);
  ASSERT_TRUE(policy->Due(32, 32));
  ASSERT_TRUE(policy->Run(seq.Input()).ok());
  std::vector<int32_t> expect = {0, 1, 2, 3};
  for (int32_t i = 12; i < 32; ++i) expect.push_back(i);
  for (int l = 0; l < h.layout.num_layers; ++l)
    for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) EXPECT_EQ(h.Positions(seq, l, kv), expect);
}

}  // namespace
}  // namespace kvserve::compression
