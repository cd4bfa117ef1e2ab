// Demoting rounds in the serving path (CompressionPolicy::RunDemoting, demotion_round.h) on
// random KV with TriAttention, over several rounds: every (layer, KV head) row puts each held
// token in the class an independent float64 reference gives it (reference scores over the union
// of full-precision candidates and tier tokens, the latter scored from their decoded keys, then
// rank order with "never better than held"), tokens only move down, every held token decodes
// to its original within its tier's error, the tiers hold whole blocks, and the audit reports
// each position exactly once, when its last copy goes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "compression/demotion.h"
#include "compression/policy_factory.h"
#include "compression_test_util.h"
#include "kernels/cpu/kv_tier.h"
#include "kernels/cpu/low_rank_keys.h"
#include "kernels/cpu/sym_eigen.h"

namespace kvserve::compression {
namespace {

using config::KvDtype;
using testing::InvFreq;
using testing::MakeContext;
using testing::RandomStats;
using testing::ReferenceScore;
using testing::TestPool;
using testing::TestSeq;
using testing::TickClock;

constexpr int kQHeads = 4;
constexpr int kBs = 4;

cache::KvLayout Layout(KvDtype d) {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 16;
  l.block_size = kBs;
  return cache::WithPrecision(l, d, d, 8);
}

// A tier pool and the sequence's table in it.
struct Tier {
  Tier(KvDtype d, int blocks, uint32_t seed) : pool(Layout(d), 16, seed) {
    table = pool.Allocate(static_cast<int64_t>(blocks) * kBs);
    storage = {pool.layout(), pool.layer_data().data(),
               pool.layout().has_scales() ? pool.layer_scales().data() : nullptr, 16};
  }
  std::vector<float> Read(int layer, int kv, int head, int64_t i) const { return pool.Read(table, layer, kv, head, i); }
  TestPool pool;
  std::vector<int32_t> table;
  kernels::cpu::KvTierStorage storage;
  TierSlots slots;
};

TEST(TieredRound, ClassesFollowAReferenceRankingAndTokensOnlyMoveDown) {
  const cache::KvLayout layout = Layout(KvDtype::kFp32);
  const std::vector<float> inv = InvFreq(layout.head_dim);
  TestPool pool(layout, 64, 5);
  TickClock clock;
  const TriAttentionStats stats = RandomStats(2, kQHeads, 2, layout.head_dim, inv, pool.rng());
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kTriAttention;
  p.budget = 16;
  p.divide_length = 8;
  p.prompt_len = 4;
  p.protect_prompt = true;
  p.tri_selection = TriSelection::kPerLayer;
  p.window = 0;
  p.demote_tokens = {8, 10};  // int8: 2 blocks; int4: 10 tokens -> 2 blocks once they fill
  ASSERT_TRUE(ValidateParams(p).ok());
  const PolicyContext ctx = MakeContext(layout, kQHeads, inv, &stats, &clock);
  auto made = CreatePolicy(p, ctx);
  ASSERT_TRUE(made.ok()) << made.status();
  CompressionPolicy& policy = **made;

  Tier int8(KvDtype::kInt8, 2, 7), int4(KvDtype::kInt4, 3, 9);
  Tier* tiers[] = {&int8, &int4};
  const double tol[] = {0.0, 0.05, 0.75};  // max |decoded - original| per class (int4 after int8)
  TestSeq seq;
  seq.pool = &pool;
  seq.table = pool.Allocate(40);
  seq.slots = policy.NewSlotState();

  const int rows = layout.num_layers * layout.num_kv_heads, hd = layout.head_dim, group = kQHeads / 2;
  std::map<std::tuple<int, int, int, int64_t>, std::vector<float>> original;  // (layer, kv, head, pos)
  std::vector<std::map<int64_t, int>> held_class(rows);                      // [row] pos -> class
  std::set<int64_t> appended, evicted;
  auto append = [&](int64_t count) {
    const int64_t first = seq.slots.size();
    const int64_t pos0 = seq.next_position;
    seq.Append(count);
    for (int l = 0; l < 2; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int h = 0; h < 2; ++h)
          for (int64_t j = 0; j < count; ++j) {
            original[{l, kv, h, pos0 + j}] = pool.Read(seq.table, l, kv, h, first + j);
          }
    for (int r = 0; r < rows; ++r)
      for (int64_t j = 0; j < count; ++j) held_class[r][pos0 + j] = 0;
    for (int64_t j = 0; j < count; ++j) appended.insert(pos0 + j);
  };

  append(24);
  const int64_t expected_tier_tokens[][2] = {{8, 0}, {8, 8}, {8, 8}, {8, 8}};
  for (int round = 0; round < 4; ++round) {
    if (round > 0) append(8);
    const int64_t n = seq.slots.size(), lo = 4, pick = 12;
    // Reference classes per row: union = int8 tokens | int4 tokens | full candidates [lo, n).
    std::vector<std::map<int64_t, int>> want(rows);
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        const int row = l * 2 + h;
        std::vector<std::vector<float>> keys;
        std::vector<int64_t> pos;
        std::vector<int> floor;
        for (int t = 0; t < 2; ++t)
          for (int64_t i = 0; i < tiers[t]->slots.size; ++i) {
            keys.push_back(tiers[t]->Read(l, 0, h, i));
            pos.push_back(tiers[t]->slots.row(row)[static_cast<size_t>(i)]);
            floor.push_back(t + 1);
          }
        for (int64_t j = lo; j < n; ++j) {
          keys.push_back(pool.Read(seq.table, l, 0, h, j));
          pos.push_back(seq.slots.positions(l, h)[static_cast<size_t>(j)]);
          floor.push_back(0);
        }
        const size_t m = keys.size();
        std::vector<double> best(m, -1e300);
        for (int g = 0; g < group; ++g) {
          std::vector<double> s(m);
          for (size_t u = 0; u < m; ++u) {
            s[u] = ReferenceScore(stats, l, h * group + g, keys[u], pos[u], seq.next_position);
          }
          double mean = 0, var = 0;
          for (double v : s) mean += v;
          mean /= static_cast<double>(m);
          for (double v : s) var += (v - mean) * (v - mean);
          const double sd = std::max(std::sqrt(var / static_cast<double>(m)), 1e-6);
          for (size_t u = 0; u < m; ++u) best[u] = std::max(best[u], (s[u] - mean) / sd);
        }
        std::vector<size_t> order(m);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return best[a] > best[b]; });
        const int64_t sizes[3] = {pick, expected_tier_tokens[round][0], expected_tier_tokens[round][1]};
        int64_t taken[3] = {0, 0, 0};
        for (size_t u : order) {
          int c = floor[u];
          while (c < 3 && taken[c] >= sizes[c]) ++c;
          if (c < 3) ++taken[c];
          want[row][pos[u]] = c < 3 ? c : -1;
        }
      }

    const auto r = policy.RunDemoting(seq.Input(), std::vector<TierRound>{
                                                       {&int8.storage, int8.table, 8, &int8.slots},
                                                       {&int4.storage, int4.table, 10, &int4.slots}});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->compacted);
    EXPECT_EQ(r->new_phys_len, 16);
    EXPECT_EQ(r->tier_tokens[0], expected_tier_tokens[round][0]) << "round " << round;
    EXPECT_EQ(r->tier_tokens[1], expected_tier_tokens[round][1]) << "round " << round;
    ASSERT_EQ(int8.slots.size, expected_tier_tokens[round][0]);
    ASSERT_EQ(int4.slots.size, expected_tier_tokens[round][1]);
    EXPECT_EQ(int4.slots.size % kBs, 0);

    // Where every row holds each token now, against the reference; data within tolerance.
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        const int row = l * 2 + h;
        std::map<int64_t, int> now;
        auto check = [&](int cls, int64_t pos, const std::vector<float>& k, const std::vector<float>& v) {
          EXPECT_FALSE(now.contains(pos)) << "position " << pos << " held twice";
          now[pos] = cls;
          for (int d = 0; d < hd; ++d) {
            EXPECT_NEAR(k[d], (original[{l, 0, h, pos}])[d], tol[cls]) << "class " << cls << " pos " << pos;
            EXPECT_NEAR(v[d], (original[{l, 1, h, pos}])[d], tol[cls]) << "class " << cls << " pos " << pos;
          }
        };
        for (int64_t j = 0; j < seq.slots.size(); ++j) {
          check(0, seq.slots.positions(l, h)[static_cast<size_t>(j)], pool.Read(seq.table, l, 0, h, j),
                pool.Read(seq.table, l, 1, h, j));
        }
        for (int t = 0; t < 2; ++t)
          for (int64_t i = 0; i < tiers[t]->slots.size; ++i) {
            check(t + 1, tiers[t]->slots.row(row)[static_cast<size_t>(i)], tiers[t]->Read(l, 0, h, i),
                  tiers[t]->Read(l, 1, h, i));
          }
        for (const auto& [pos, cls] : want[row]) {
          if (cls < 0) {
            EXPECT_FALSE(now.contains(pos)) << "row " << row << " still holds evicted position " << pos;
          } else {
            EXPECT_EQ(now[pos], cls) << "row " << row << " position " << pos << " round " << round;
          }
        }
        for (const auto& [pos, cls] : now) {
          EXPECT_GE(cls, held_class[row][pos]) << "position " << pos << " moved up";
        }
        for (int64_t pos = 0; pos < lo; ++pos) EXPECT_EQ(now[pos], 0) << "the protected prompt left full precision";
        held_class[row] = now;
      }
    // Audit: positions no row holds any more, reported once.
    for (int64_t ep : r->evicted_positions) {
      EXPECT_TRUE(evicted.insert(ep).second) << "position " << ep << " reported twice";
      for (int row = 0; row < rows; ++row) EXPECT_FALSE(held_class[row].contains(ep));
    }
    if (round == 3) {
      EXPECT_GT(r->demoted_tokens, 0);
      EXPECT_FALSE(r->evicted_positions.empty());
    }
  }
  for (int64_t ap : appended) {
    bool held = false;
    for (int row = 0; row < rows; ++row) held |= held_class[row].contains(ap);
    EXPECT_NE(held, evicted.contains(ap)) << "position " << ap;
  }
}

TEST(TieredRound, WithoutRankingPolicyOrBadTiersItFailsCleanly) {
  const cache::KvLayout layout = Layout(KvDtype::kFp32);
  const std::vector<float> inv = InvFreq(layout.head_dim);
  TestPool pool(layout, 32, 3);
  TickClock clock;
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kStreamingLlm;
  p.budget = 16;
  p.divide_length = 8;
  p.demote_tokens = {8};
  EXPECT_FALSE(ValidateParams(p).ok());
  p.demote_tokens = {};
  auto made = CreatePolicy(p, MakeContext(layout, kQHeads, inv, nullptr, &clock));
  ASSERT_TRUE(made.ok());
  TestSeq seq;
  seq.pool = &pool;
  seq.table = pool.Allocate(24);
  seq.slots = (*made)->NewSlotState();
  seq.Append(24);
  Tier int8(KvDtype::kInt8, 2, 7);
  const auto before = pool.AllBytes();
  const auto r = (*made)->RunDemoting(seq.Input(), std::vector<TierRound>{{&int8.storage, int8.table, 8, &int8.slots}});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(pool.AllBytes(), before) << "a refused round touched the cache";
  // A tier of another geometry is refused before anything moves.
  TestPool other(Layout(KvDtype::kInt8), 8, 1);
  kernels::cpu::KvTierStorage odd{other.layout(), other.layer_data().data(), other.layer_scales().data(), 8};
  odd.layout.head_dim = 8;
  const auto r2 = (*made)->RunDemoting(seq.Input(), std::vector<TierRound>{{&odd, int8.table, 8, &int8.slots}});
  EXPECT_FALSE(r2.ok());
  EXPECT_EQ(pool.AllBytes(), before);
}

}  // namespace
}  // namespace kvserve::compression

namespace kvserve::compression {
namespace {

// A low-rank key tier (kernels/cpu/kv_tier.h) in a demoting round: every token the round puts
// there reads back as mu + U U^T (k - mu) of its original key (computed here in float64 from
// the packed basis), its value exactly (fp32 values), tokens move between rounds without
// drifting, and the tier holds whole blocks.
TEST(TieredRound, LowRankTierHoldsProjectedKeysAndExactValues) {
  const cache::KvLayout layout = Layout(KvDtype::kFp32);
  const int hd = layout.head_dim, rank = 5;
  const std::vector<float> inv = InvFreq(hd);
  TestPool pool(layout, 64, 3);
  TickClock clock;
  const TriAttentionStats stats = RandomStats(2, kQHeads, 2, hd, inv, pool.rng());
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kTriAttention;
  p.budget = 16;
  p.divide_length = 8;
  p.prompt_len = 4;
  p.protect_prompt = true;
  p.window = 0;
  p.demote_tokens = {12};  // 3 blocks of the low-rank tier
  ASSERT_TRUE(ValidateParams(p).ok());
  const PolicyContext ctx = MakeContext(layout, kQHeads, inv, &stats, &clock);
  auto made = CreatePolicy(p, ctx);
  ASSERT_TRUE(made.ok()) << made.status();
  CompressionPolicy& policy = **made;

  // Per (layer, head) a random orthonormal basis and mean, packed for the kernels.
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<std::vector<float>> packed(2);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) {
      std::vector<double> a(static_cast<size_t>(hd) * hd);
      for (int i = 0; i < hd; ++i)
        for (int j = i; j < hd; ++j) a[static_cast<size_t>(i) * hd + j] = a[static_cast<size_t>(j) * hd + i] = nd(pool.rng());
      auto e = kernels::cpu::EigenSymmetric(a, hd);
      ASSERT_TRUE(e.ok());
      for (int d = 0; d < hd; ++d) packed[l].push_back(static_cast<float>(0.3 * nd(pool.rng())));
      for (int twice = 0; twice < 2; ++twice)  // orthonormal: P = R
        for (int j = 0; j < rank; ++j)
          for (int d = 0; d < hd; ++d) packed[l].push_back(static_cast<float>(e->vectors[static_cast<size_t>(j) * hd + d]));
    }
  const float* basis_ptrs[] = {packed[0].data(), packed[1].data()};
  cache::KvLayout tl = layout;
  tl.key_rank = rank;
  TestPool tier_pool(tl, 16, 4);
  const std::vector<int32_t> tier_table = tier_pool.Allocate(3 * kBs);
  const kernels::cpu::KvTierStorage storage{tl, tier_pool.layer_data().data(), nullptr, 16, basis_ptrs};
  TierSlots tier_slots;
  auto projected = [&](int l, int h, const std::vector<float>& k) {
    const float* b = packed[l].data() + static_cast<size_t>(h) * kernels::cpu::LowRankHeadFloats(hd, rank);
    std::vector<double> out(b, b + hd);
    for (int j = 0; j < rank; ++j) {
      const float* u = b + static_cast<size_t>(1 + j) * hd;  // P row j (= R row j here)
      double c = 0;
      for (int d = 0; d < hd; ++d) c += static_cast<double>(u[d]) * (k[d] - b[d]);
      for (int d = 0; d < hd; ++d) out[d] += c * u[d];
    }
    return out;
  };

  TestSeq seq;
  seq.pool = &pool;
  seq.table = pool.Allocate(40);
  seq.slots = policy.NewSlotState();
  std::map<std::tuple<int, int, int, int64_t>, std::vector<float>> original;
  auto append = [&](int64_t count) {
    const int64_t first = seq.slots.size(), pos0 = seq.next_position;
    seq.Append(count);
    for (int l = 0; l < 2; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int h = 0; h < 2; ++h)
          for (int64_t j = 0; j < count; ++j) original[{l, kv, h, pos0 + j}] = pool.Read(seq.table, l, kv, h, first + j);
  };
  append(24);
  const int64_t want_tier[] = {8, 12, 12};  // round 0 demotes 24 - 16 = 8 (two blocks), then the tier fills
  for (int round = 0; round < 3; ++round) {
    if (round > 0) append(8);
    const auto r = policy.RunDemoting(seq.Input(), std::vector<TierRound>{{&storage, tier_table, 12, &tier_slots}});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(tier_slots.size, want_tier[round]) << "round " << round;
    EXPECT_EQ(r->tier_tokens[0], want_tier[round]);
    EXPECT_EQ(r->new_phys_len, 16);
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        std::set<int64_t> seen;
        for (int64_t j = 0; j < seq.slots.size(); ++j) seen.insert(seq.slots.positions(l, h)[static_cast<size_t>(j)]);
        for (int64_t i = 0; i < tier_slots.size; ++i) {
          const int64_t pos = tier_slots.row(l * 2 + h)[static_cast<size_t>(i)];
          EXPECT_TRUE(seen.insert(pos).second) << "position " << pos << " held twice";
          std::vector<float> k(hd), v(hd);
          kernels::cpu::ReadTierRow(storage, l, tier_table[static_cast<size_t>(i / kBs)], 0, h, static_cast<int>(i % kBs), k.data());
          kernels::cpu::ReadTierRow(storage, l, tier_table[static_cast<size_t>(i / kBs)], 1, h, static_cast<int>(i % kBs), v.data());
          const std::vector<double> want = projected(l, h, original[{l, 0, h, pos}]);
          for (int d = 0; d < hd; ++d) {
            ASSERT_NEAR(k[d], want[d], 1e-4) << "round " << round << " pos " << pos;
            ASSERT_EQ(v[d], (original[{l, 1, h, pos}])[d]) << "round " << round << " pos " << pos;
          }
        }
      }
  }
}

}  // namespace
}  // namespace kvserve::compression
