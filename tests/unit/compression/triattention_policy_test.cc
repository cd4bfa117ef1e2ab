// TriAttention rounds end to end on random KV: the keep sets equal an independent float64
// selection, the cache is a permutation of the kept rows (positions move with them), the
// pinned prompt never moves, the audit follows its documented semantics, blocks freed match
// KvCacheManager::truncate, and a round with nothing to evict touches nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "cache/kv_cache_manager.h"
#include "compression/policy_factory.h"
#include "compression/triattention_policy.h"
#include "compression_test_util.h"
#include "config/fields.h"

namespace kvserve::compression {
namespace {

using testing::InvFreq;
using testing::MakeContext;
using testing::RandomStats;
using testing::ReferenceTriKeep;
using testing::TestPool;
using testing::TestSeq;
using testing::TickClock;

constexpr int kQHeads = 4;

cache::KvLayout Layout(config::KvDtype dtype) {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 16;
  l.block_size = 4;
  l.dtype = dtype;
  return l;
}

struct Harness {
  explicit Harness(config::KvDtype dtype, uint32_t seed = 21)
      : layout(Layout(dtype)), inv_freq(InvFreq(layout.head_dim)), pool(layout, 64, seed) {
    stats = RandomStats(layout.num_layers, kQHeads, layout.num_kv_heads, layout.head_dim, inv_freq,
                        pool.rng());
  }
  std::unique_ptr<CompressionPolicy> Make(const PolicyParams& p) {
    auto r = CreatePolicy(p, MakeContext(layout, kQHeads, inv_freq, &stats, &clock));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  TestSeq NewSeq(const CompressionPolicy& policy, std::vector<int32_t> table) {
    TestSeq s;
    s.pool = &pool;
    s.table = std::move(table);
    s.slots = policy.NewSlotState();
    return s;
  }

  cache::KvLayout layout;
  std::vector<float> inv_freq;
  TestPool pool;
  TriAttentionStats stats;
  TickClock clock;
};

PolicyParams TriParams(int64_t budget, int64_t beta, int64_t prompt, bool protect = true) {
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kTriAttention;
  p.budget = budget;
  p.divide_length = beta;
  p.prompt_len = prompt;
  p.protect_prompt = protect;
  // The per-(layer, KV head) mode without guards, against ReferenceTriKeep; the paper's
  // cross-layer default and the guards are tested separately below.
  p.tri_selection = TriSelection::kPerLayer;
  p.sinks = 0;
  p.window = 0;
  return p;
}

// Everything a round must preserve, captured before it runs.
struct Before {
  std::vector<std::vector<int32_t>> positions;            // [row][slot]
  std::vector<std::vector<std::vector<std::byte>>> k, v;  // [row][slot] raw bytes
};

Before Capture(const TestSeq& s) {
  const cache::KvLayout& l = s.pool->layout();
  Before b;
  for (int layer = 0; layer < l.num_layers; ++layer)
    for (int h = 0; h < l.num_kv_heads; ++h) {
      const auto pos = s.slots.positions(layer, h);
      b.positions.emplace_back(pos.begin(), pos.end());
      b.k.emplace_back();
      b.v.emplace_back();
      for (int64_t i = 0; i < s.slots.size(); ++i) {
        b.k.back().push_back(s.pool->RawRow(s.table, layer, 0, h, i));
        b.v.back().push_back(s.pool->RawRow(s.table, layer, 1, h, i));
      }
    }
  return b;
}

// Checks the cache and the SlotState after a round against the expected keep lists and
// returns the positions no row holds any more (the audit's expected evicted_positions).
std::vector<int64_t> CheckCompacted(const TestSeq& s, const Before& b,
                                    const std::vector<int32_t>& keep, int64_t lo, int64_t k) {
  const cache::KvLayout& l = s.pool->layout();
  const int64_t rows = static_cast<int64_t>(l.num_layers) * l.num_kv_heads;
  EXPECT_EQ(s.slots.size(), lo + k);
  std::set<int64_t> before_any, after_any;
  for (int64_t r = 0; r < rows; ++r) {
    const int layer = static_cast<int>(r / l.num_kv_heads),
              h = static_cast<int>(r % l.num_kv_heads);
    const auto pos = s.slots.positions(layer, h);
    before_any.insert(b.positions[r].begin(), b.positions[r].end());
    uint64_t want = testing::Fnv({}), got = testing::Fnv({});
    for (int64_t i = 0; i < lo + k; ++i) {
      const int64_t src = i < lo ? i : keep[r * k + (i - lo)];
      EXPECT_EQ(pos[i], b.positions[r][src]) << "row " << r << " slot " << i;
      EXPECT_EQ(s.pool->RawRow(s.table, layer, 0, h, i), b.k[r][src])
          << "K row " << r << " slot " << i;
      EXPECT_EQ(s.pool->RawRow(s.table, layer, 1, h, i), b.v[r][src])
          << "V row " << r << " slot " << i;
      want = testing::Fnv(b.k[r][src], testing::Fnv(b.v[r][src], want));
      got = testing::Fnv(s.pool->RawRow(s.table, layer, 0, h, i),
                         testing::Fnv(s.pool->RawRow(s.table, layer, 1, h, i), got));
      after_any.insert(pos[i]);
    }
    EXPECT_EQ(got, want) << "checksum of row " << r;
    for (int64_t i = 1; i < lo + k; ++i)
      EXPECT_LT(pos[i - 1], pos[i]) << "positions stay ascending";
  }
  std::vector<int64_t> gone;
  for (int64_t p : before_any)
    if (!after_any.contains(p)) gone.push_back(p);
  return gone;
}

class TriAttentionRound : public ::testing::TestWithParam<config::KvDtype> {};

TEST_P(TriAttentionRound, KeepsTheReferenceSelectionAndFreesTailBlocks) {
  Harness h(GetParam());
  const int64_t prompt = 6, budget = 20, beta = 8;
  auto policy = h.Make(TriParams(budget, beta, prompt));
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(policy->first_evictable_slot(), prompt);
  EXPECT_EQ(policy->target_length(), budget);
  EXPECT_FALSE(policy->needs().attention_mass || policy->needs().pre_rope_queries);

  // The block table comes from the real cache manager, so its truncate proves the accounting.
  cache::KvCacheManagerOptions mo;
  mo.layout = h.layout;
  mo.num_blocks = 64;
  mo.enable_prefix_caching = false;
  cache::KvCacheManager mgr(mo, base::Logger());
  const cache::SeqId seq_id(7);
  auto table_of = [&] {
    std::vector<int32_t> t;
    for (cache::BlockId b : mgr.block_table(seq_id)) t.push_back(b.value());
    return t;
  };
  ASSERT_TRUE(mgr.allocate(seq_id, 28).has_value());
  TestSeq seq = h.NewSeq(*policy, table_of());
  seq.Append(28);
  EXPECT_FALSE(policy->Due(27, 27));
  EXPECT_TRUE(policy->Due(28, 28));

  for (int round = 0; round < 3; ++round) {
    const Before before = Capture(seq);
    const int64_t n = seq.slots.size();
    const std::vector<int32_t> want_keep = ReferenceTriKeep(seq, h.stats, prompt, budget - prompt);
    auto r = policy->Run(seq.Input());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->compacted);
    EXPECT_EQ(r->phys_len_before, n);
    EXPECT_EQ(r->new_phys_len, budget);
    EXPECT_EQ(r->evicted_slots, n - budget);
    EXPECT_EQ(r->blocks_before, (n + 3) / 4);
    EXPECT_EQ(r->blocks_after, budget / 4);
    EXPECT_GT(r->score_ns, 0);
    EXPECT_GT(r->select_ns, 0);
    EXPECT_GT(r->compact_ns, 0);
    EXPECT_GT(r->bytes_moved, 0);
    const std::vector<int64_t> gone =
        CheckCompacted(seq, before, want_keep, prompt, budget - prompt);
    EXPECT_EQ(r->evicted_positions, gone);
    EXPECT_EQ(r->evicted_prompt_tokens, 0) << "the prompt is pinned";
    for (int64_t p : r->evicted_positions) EXPECT_GE(p, prompt);
    // The pinned prompt stays in place (its bytes were checked by CheckCompacted).
    for (int layer = 0; layer < h.layout.num_layers; ++layer)
      for (int kv = 0; kv < h.layout.num_kv_heads; ++kv)
        for (int64_t i = 0; i < prompt; ++i) EXPECT_EQ(seq.slots.positions(layer, kv)[i], i);

    EXPECT_EQ(mgr.truncate(seq_id, r->new_phys_len), r->blocks_freed());
    EXPECT_EQ(static_cast<int64_t>(mgr.block_table(seq_id).size()), r->blocks_after);
    // Decode continues: beta more tokens, then the next round is due.
    ASSERT_TRUE(mgr.allocate(seq_id, static_cast<int>(beta)).has_value());
    seq.table = table_of();
    EXPECT_FALSE(policy->Due(seq.slots.size(), seq.next_position));
    seq.Append(beta);
    EXPECT_TRUE(policy->Due(seq.slots.size(), seq.next_position));
  }
}

// A backend that scores where its KV lives (the CUDA backend's CudaKvAccess): it gets the
// scorer's weights and returns pooled scores, and the policy then reads no key at all. This
// one scores from the weights with the formula kv_access.h documents (an independent
// restatement: virtual-query dot product, max over pools, norm term; z-normalisation per
// query head; max over the group) on the host pool's rows.
class ScoringAccess final : public testing::DelegatingKvAccess {
 public:
  // batched: also offers ScoreTriAttentionAll (scoring each head with the formula below).
  explicit ScoringAccess(HostKvAccess& host, bool batched = false)
      : DelegatingKvAccess(host), batched_(batched) {}
  bool ScoresTriAttentionBatched() const override { return batched_; }
  bool ScoreTriAttentionAll(std::span<const int32_t> table, int64_t begin, int64_t end,
                            std::span<const TriKeyWeights> weights,
                            std::span<double> pooled) override {
    ++batch_calls;
    const int kv_heads = layout().num_kv_heads;
    const auto n = static_cast<size_t>(end - begin);
    for (size_t i = 0; i < weights.size(); ++i) {
      ScoreTriAttention(table, static_cast<int>(i) / kv_heads, static_cast<int>(i) % kv_heads,
                        begin, end, weights[i], pooled.subspan(i * n, n));
    }
    return true;
  }
  bool ScoreTriAttention(std::span<const int32_t> table, int layer, int kv_head, int64_t begin,
                         int64_t end, const TriKeyWeights& w, std::span<double> pooled) override {
    ++scored;
    const int d = layout().head_dim, f_count = d / 2;
    const int64_t n = end - begin;
    std::vector<float> keys(static_cast<size_t>(n * d));
    host().ReadRows(table, layer, 0, kv_head, begin, end, keys.data());
    std::fill(pooled.begin(), pooled.begin() + n, -std::numeric_limits<double>::infinity());
    for (int g = 0; g < w.group; ++g) {
      std::vector<double> row(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const float* k = keys.data() + j * d;
        double trig = w.trig ? -std::numeric_limits<double>::infinity() : 0.0, norm = 0.0;
        for (int p = 0; w.trig && p < w.pools; ++p) {
          double t = 0.0;
          for (int i = 0; i < d; ++i)
            t += w.w[static_cast<size_t>((p * w.group + g) * d + i)] * k[i];
          trig = std::max(trig, t);
        }
        for (int f = 0; w.norm && f < f_count; ++f) {
          norm += w.c[static_cast<size_t>(g * f_count + f)] *
                  std::hypot(double{k[f]}, double{k[f + f_count]});
        }
        row[static_cast<size_t>(j)] = trig + norm;
      }
      double mean = 0.0, var = 0.0;
      for (double v : row) mean += v / static_cast<double>(n);
      for (double v : row) var += (v - mean) * (v - mean) / static_cast<double>(n);
      const double sd = std::max(std::sqrt(var), 1e-6);
      for (int64_t j = 0; j < n; ++j) {
        pooled[static_cast<size_t>(j)] =
            std::max(pooled[static_cast<size_t>(j)], (row[static_cast<size_t>(j)] - mean) / sd);
      }
    }
    return true;
  }
  int scored = 0;
  int batch_calls = 0;

 private:
  bool batched_;
};

TEST(TriAttentionPolicy, ABackendThatScoresInPlaceGetsTheWeightsAndNoKeyIsRead) {
  Harness h(config::KvDtype::kBf16, 33);
  const int64_t prompt = 6, budget = 20;
  auto policy = h.Make(TriParams(budget, 8, prompt));
  ASSERT_NE(policy, nullptr);
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(36));
  seq.Append(36);
  const Before before = Capture(seq);
  const std::vector<int32_t> want_keep = ReferenceTriKeep(seq, h.stats, prompt, budget - prompt);
  ScoringAccess access(h.pool.access());
  RoundInput in = seq.Input();
  in.kv = &access;
  auto r = policy->Run(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.scored, h.layout.num_layers * h.layout.num_kv_heads)
      << "one call per (layer, KV head)";
  EXPECT_EQ(access.reads, 0) << "the policy read keys although the backend scored them";
  CheckCompacted(seq, before, want_keep, prompt, budget - prompt);
}

// A backend that scores every head in one call (CudaKvAccess: one device synchronisation per
// round): the policy hands it each head's weights in (layer, KV head) order, calls it once and
// selects exactly what it selects from per-head scoring.
TEST(TriAttentionPolicy, ABatchingBackendIsCalledOncePerRoundWithEveryHeadsWeights) {
  Harness h(config::KvDtype::kBf16, 33);
  const int64_t prompt = 6, budget = 20;
  auto policy = h.Make(TriParams(budget, 8, prompt));
  ASSERT_NE(policy, nullptr);
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(36));
  seq.Append(36);
  const Before before = Capture(seq);
  const std::vector<int32_t> want_keep = ReferenceTriKeep(seq, h.stats, prompt, budget - prompt);
  ScoringAccess access(h.pool.access(), /*batched=*/true);
  RoundInput in = seq.Input();
  in.kv = &access;
  auto r = policy->Run(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.batch_calls, 1);
  EXPECT_EQ(access.scored, h.layout.num_layers * h.layout.num_kv_heads)
      << "every head scored inside the batch";
  EXPECT_EQ(access.reads, 0) << "the policy read keys although the backend scored them";
  CheckCompacted(seq, before, want_keep, prompt, budget - prompt);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TriAttentionRound,
                         ::testing::Values(config::KvDtype::kFp32, config::KvDtype::kBf16,
                                           config::KvDtype::kInt8),
                         [](const auto& p) { return std::string(config::Name(p.param)); });

TEST(TriAttentionPolicy, UnprotectedPromptIsEvictableAndAuditedPerPosition) {
  Harness h(config::KvDtype::kFp32, 4);
  const int64_t prompt = 10, budget = 12;
  auto policy = h.Make(TriParams(budget, 6, prompt, /*protect=*/false));
  EXPECT_EQ(policy->first_evictable_slot(), 0);
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(40));
  seq.Append(18);
  const Before before = Capture(seq);
  const std::vector<int32_t> want_keep = ReferenceTriKeep(seq, h.stats, 0, budget);
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<int64_t> gone = CheckCompacted(seq, before, want_keep, 0, budget);
  EXPECT_EQ(r->evicted_positions, gone);
  // Per-head sets differ, so fewer positions are fully gone than slots freed per row.
  EXPECT_EQ(r->evicted_slots, 6);
  EXPECT_LT(static_cast<int64_t>(gone.size()), r->evicted_slots);
  EXPECT_EQ(r->evicted_prompt_tokens,
            std::count_if(gone.begin(), gone.end(), [&](int64_t p) { return p < prompt; }));

  // Second round: a position dropped earlier by some rows but kept by others is reported
  // once, when its last copy goes.
  seq.Append(6);
  std::set<int64_t> reported(gone.begin(), gone.end());
  const Before before2 = Capture(seq);
  const std::vector<int32_t> want_keep2 = ReferenceTriKeep(seq, h.stats, 0, budget);
  auto r2 = policy->Run(seq.Input());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->evicted_positions, CheckCompacted(seq, before2, want_keep2, 0, budget));
  for (int64_t p : r2->evicted_positions)
    EXPECT_FALSE(reported.contains(p)) << "position " << p << " reported twice";
}

TEST(TriAttentionPolicy, BudgetCoveringTheSequenceTouchesNothing) {
  Harness h(config::KvDtype::kInt8);
  auto policy = h.Make(TriParams(64, 16, 5));
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(79));
  seq.Append(60);
  for (int64_t n = 0; n < 80; ++n) EXPECT_FALSE(policy->Due(n, n)) << n;
  EXPECT_TRUE(policy->Due(80, 80));
  const auto bytes = h.pool.AllBytes();
  const Before before = Capture(seq);
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->compacted);
  EXPECT_EQ(r->new_phys_len, 60);
  EXPECT_EQ(r->blocks_freed(), 0);
  EXPECT_TRUE(r->evicted_positions.empty());
  EXPECT_EQ(r->bytes_moved, 0);
  EXPECT_EQ(h.pool.AllBytes(), bytes);
  EXPECT_EQ(Capture(seq).positions, before.positions);
}

TEST(TriAttentionPolicy, FullPolicyIsNeverDueAndNeverTouchesTheCache) {
  Harness h(config::KvDtype::kFp32);
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kFull;
  p.budget = 1;  // ignored
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(40));
  EXPECT_FALSE(seq.slots.tracks_slots());
  seq.Append(40);
  for (int64_t n : {0, 1, 100, 1 << 20}) EXPECT_FALSE(policy->Due(n, n));
  const auto bytes = h.pool.AllBytes();
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->compacted);
  EXPECT_EQ(r->new_phys_len, 40);
  EXPECT_EQ(h.pool.AllBytes(), bytes);
}

TEST(TriAttentionPolicy, BadInputsFailWithoutTouchingTheCache) {
  Harness h(config::KvDtype::kFp32);
  auto policy = h.Make(TriParams(10, 4, 2));
  TestSeq seq = h.NewSeq(*policy, h.pool.Allocate(40));
  seq.Append(20);
  const auto bytes = h.pool.AllBytes();

  RoundInput in = seq.Input();
  in.next_position = 19;  // not after the newest cached position (19)
  auto r = policy->Run(in);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "next_position")) << r.status();

  in = seq.Input();
  in.phys_len = 19;  // SlotState holds 20
  EXPECT_EQ(policy->Run(in).status().code(), absl::StatusCode::kFailedPrecondition);

  in = seq.Input();
  cache::KvLayout other = h.pool.layout();
  other.num_kv_heads = 1;
  std::vector<std::byte*> no_data(static_cast<size_t>(other.num_layers), nullptr);
  HostKvAccess mismatched(other, no_data, {});
  in.kv = &mismatched;
  EXPECT_EQ(policy->Run(in).status().code(), absl::StatusCode::kInvalidArgument);

  in = seq.Input();
  in.block_table = std::span<const int32_t>(seq.table).first(1);  // 20 slots need 5 blocks of 4
  EXPECT_EQ(policy->Run(in).status().code(), absl::StatusCode::kInvalidArgument);

  in = seq.Input();
  in.kv = nullptr;
  EXPECT_EQ(policy->Run(in).status().code(), absl::StatusCode::kInvalidArgument);

  in = seq.Input();
  in.slots = nullptr;
  EXPECT_FALSE(policy->Run(in).ok());

  SlotState untracked;  // not from NewSlotState: positions would not move with the KV
  untracked.Append(0, 20);
  in = seq.Input();
  in.slots = &untracked;
  EXPECT_EQ(policy->Run(in).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.pool.AllBytes(), bytes);
  EXPECT_EQ(seq.slots.size(), 20);
}

// Hybrid models (Gemma 3, gpt-oss): a window layer is never scored and keeps the latest slots
// of the compacted length, so the cross-layer mean is over the global layers alone; a budget
// that would leave less than the window after the pinned prefix is refused, as is demotion.
TEST(TriAttentionPolicy, WindowLayersKeepTheirLatestSlotsAndAreNotScored) {
  const int64_t prompt = 6, budget = 20, beta = 8, n = 28, k = budget - prompt;
  const std::vector<int32_t> windows = {0, 6};  // layer 0 global, layer 1 windowed
  auto run = [&](bool hybrid, Harness& h, TestSeq& seq) {
    PolicyContext ctx = MakeContext(h.layout, kQHeads, h.inv_freq, &h.stats, &h.clock);
    if (hybrid) {
      ctx.layer_window = windows;
      ctx.binding_window = 6;
    }
    PolicyParams p = TriParams(budget, beta, prompt);
    p.tri_selection = TriSelection::kCrossLayer;
    auto policy = CreatePolicy(p, ctx);
    EXPECT_TRUE(policy.ok()) << policy.status();
    seq = h.NewSeq(**policy, h.pool.Allocate(40));
    seq.Append(n);
    const Before before = Capture(seq);
    std::vector<int32_t> want = ReferenceTriKeep(seq, h.stats, prompt, k);  // per layer
    for (int kv = 0; kv < h.layout.num_kv_heads; ++kv) {
      for (int64_t i = 0; i < k; ++i)
        want[(h.layout.num_kv_heads + kv) * k + i] = static_cast<int32_t>(n - k + i);
    }
    auto r = (*policy)->Run(seq.Input());
    EXPECT_TRUE(r.ok()) << r.status();
    if (hybrid) {
      // Layer 0 alone decides the global rows (its per-layer selection); layer 1 keeps the
      // latest k slots, contiguous in position.
      EXPECT_EQ(CheckCompacted(seq, before, want, prompt, k), r->evicted_positions);
    }
    return std::vector<int32_t>(seq.slots.positions(0, 0).begin(), seq.slots.positions(0, 0).end());
  };
  Harness hybrid_h(config::KvDtype::kFp32, 33), plain_h(config::KvDtype::kFp32, 33);
  TestSeq a, b;
  const std::vector<int32_t> hybrid_keep = run(true, hybrid_h, a);
  const std::vector<int32_t> plain_keep = run(false, plain_h, b);
  EXPECT_NE(hybrid_keep, plain_keep)
      << "with both layers scored the cross-layer mean selects otherwise";

  PolicyContext ctx =
      MakeContext(hybrid_h.layout, kQHeads, hybrid_h.inv_freq, &hybrid_h.stats, &hybrid_h.clock);
  ctx.layer_window = windows;
  ctx.binding_window = 6;
  auto tight = CreatePolicy(TriParams(prompt + 4, beta, prompt), ctx);  // keeps 4 < window - 1
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tight.status().message(), "kv_compression.budget"))
      << tight.status();
  EXPECT_TRUE(absl::StrContains(tight.status().message(), "sliding window")) << tight.status();
  EXPECT_TRUE(CreatePolicy(TriParams(prompt + 5, beta, prompt), ctx).ok())
      << "window - 1 slots suffice";
}

TEST(PolicyFactory, TriAttentionNeedsMatchingStats) {
  Harness h(config::KvDtype::kFp32);
  PolicyContext c = MakeContext(h.layout, kQHeads, h.inv_freq, nullptr, &h.clock);
  auto r = CreatePolicy(TriParams(10, 4, 2), c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "kvserve calibrate")) << r.status();

  TriAttentionStats other = h.stats;
  other.num_layers = 3;
  other.entries.resize(other.entries.size() * 3 / 2);
  c.triattention_stats = &other;
  r = CreatePolicy(TriParams(10, 4, 2), c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);

  c.triattention_stats = &h.stats;
  c.rope_inv_freq = {};
  EXPECT_EQ(CreatePolicy(TriParams(10, 4, 2), c).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::compression
