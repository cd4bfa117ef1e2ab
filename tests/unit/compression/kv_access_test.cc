// The compression/backend seam: policies reach KV only through KvAccess (HostKvAccess is the
// CPU implementation), SlotState follows a keep plan on the host (ApplyKeepPlan) exactly as
// the compaction kernel moves side arrays, and KvCompressor hands each sequence its slice of
// the step's side-output buffers once per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "compression/host_kv_access.h"
#include "compression/kv_compressor.h"
#include "compression/policy_factory.h"
#include "compression_test_util.h"
#include "config/fields.h"

namespace kvserve::compression {
namespace {

using testing::InvFreq;
using testing::MakeContext;
using testing::TestPool;
using testing::TestSeq;
using testing::TickClock;

cache::KvLayout Layout(config::KvDtype dtype) {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 8;
  l.block_size = 4;
  l.dtype = dtype;
  return l;
}

class HostKvAccessTest : public ::testing::TestWithParam<config::KvDtype> {};

TEST_P(HostKvAccessTest, ReadRowsDequantizesAcrossScatteredBlocks) {
  const cache::KvLayout layout = Layout(GetParam());
  TestPool pool(layout, 16);
  const std::vector<int32_t> table = pool.Allocate(23);
  pool.FillRandom(table, 23);
  std::vector<float> out(static_cast<size_t>(20 * layout.head_dim));
  for (int l = 0; l < layout.num_layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < layout.num_kv_heads; ++h) {
        pool.access().ReadRows(table, l, kv, h, 3, 23, out.data());
        for (int64_t i = 3; i < 23; ++i) {
          const std::vector<float> want = pool.Read(table, l, kv, h, i);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + (i - 3) * layout.head_dim))
              << "layer " << l << " kv " << kv << " head " << h << " slot " << i;
        }
      }
}

TEST_P(HostKvAccessTest, CompactPlusApplyKeepPlanEqualsTheKernelWithSideArrays) {
  const cache::KvLayout layout = Layout(GetParam());
  const int64_t len = 30, lo = 5, scored_end = 26, k = 9;
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  std::mt19937 rng(3);
  std::vector<int32_t> keep;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> cand(static_cast<size_t>(scored_end - lo));
    std::iota(cand.begin(), cand.end(), static_cast<int32_t>(lo));
    std::shuffle(cand.begin(), cand.end(), rng);
    cand.resize(static_cast<size_t>(k));
    std::sort(cand.begin(), cand.end());
    keep.insert(keep.end(), cand.begin(), cand.end());
  }
  const KeepPlan plan{lo, scored_end, len, k, keep.data()};

  // Reference: the kernel moving KV and side arrays together.
  TestPool ref_pool(layout, 16, 5), pool(layout, 16, 5);
  const std::vector<int32_t> table = ref_pool.Allocate(len);
  ASSERT_EQ(pool.Allocate(len), table);
  ref_pool.FillRandom(table, len);
  pool.FillRandom(table, len);
  ASSERT_EQ(ref_pool.AllBytes(), pool.AllBytes());

  SlotStateOptions o;
  o.num_layers = layout.num_layers;
  o.num_kv_heads = layout.num_kv_heads;
  o.track_mass = true;
  SlotState slots(o);
  slots.Append(100, len);  // positions 100.., mass = position * 0.5 + row
  for (int l = 0; l < layout.num_layers; ++l)
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      std::vector<float> m(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) m[i] = static_cast<float>((100 + i) * 0.5 + l * 10 + h);
      slots.AddMass(l, h, m.data(), len);
    }
  std::vector<int32_t> pos(static_cast<size_t>(rows * len));
  std::vector<float> mass(static_cast<size_t>(rows * len));
  for (int l = 0; l < layout.num_layers; ++l)
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      const int64_t r = static_cast<int64_t>(l) * layout.num_kv_heads + h;
      std::copy_n(slots.positions(l, h).data(), len, pos.data() + r * len);
      std::copy_n(slots.mass(l, h).data(), len, mass.data() + r * len);
    }
  const kernels::cpu::SlotSideArray side[2] = {{reinterpret_cast<std::byte*>(pos.data()), len, 4},
                                               {reinterpret_cast<std::byte*>(mass.data()), len, 4}};
  const CompactStats want = kernels::cpu::CompactKv(layout, ref_pool.layer_data().data(),
                                                    layout.has_scales() ? ref_pool.layer_scales().data() : nullptr,
                                                    table.data(), plan, side, 2);

  const CompactStats got = pool.access().Compact(table, plan);
  slots.ApplyKeepPlan(plan);
  EXPECT_EQ(got.new_len, want.new_len);
  EXPECT_EQ(got.rows_moved, want.rows_moved);
  EXPECT_EQ(got.bytes_moved, want.bytes_moved);
  EXPECT_EQ(pool.AllBytes(), ref_pool.AllBytes()) << "KV differs from the kernel's";
  ASSERT_EQ(slots.size(), plan.new_len());
  for (int l = 0; l < layout.num_layers; ++l)
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      const int64_t r = static_cast<int64_t>(l) * layout.num_kv_heads + h;
      for (int64_t i = 0; i < slots.size(); ++i) {
        ASSERT_EQ(slots.positions(l, h)[i], pos[r * len + i]) << "row " << r << " slot " << i;
        ASSERT_EQ(slots.mass(l, h)[i], mass[r * len + i]) << "row " << r << " slot " << i;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, HostKvAccessTest, ::testing::ValuesIn(testing::kAllDtypes),
                         [](const auto& p) { return std::string(config::Name(p.param)); });

// Delegates to a HostKvAccess and records what a round asks of the backend.
class RecordingKvAccess final : public KvAccess {
 public:
  explicit RecordingKvAccess(KvAccess& inner) : inner_(inner) {}
  const cache::KvLayout& layout() const override { return inner_.layout(); }
  void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                float* out) override {
    reads.push_back({layer, kv, head, begin, end});
    inner_.ReadRows(table, layer, kv, head, begin, end, out);
  }
  CompactStats Compact(std::span<const int32_t> table, const KeepPlan& plan) override {
    ++compacts;
    last_new_len = plan.new_len();
    return inner_.Compact(table, plan);
  }
  struct Read {
    int layer, kv, head;
    int64_t begin, end;
  };
  std::vector<Read> reads;
  int compacts = 0;
  int64_t last_new_len = 0;

 private:
  KvAccess& inner_;
};

TEST(KvAccessSeam, TriAttentionRoundReadsOnlyCandidateKeysAndCompactsOnceThroughTheInterface) {
  const cache::KvLayout layout = Layout(config::KvDtype::kFp32);
  const std::vector<float> inv = InvFreq(layout.head_dim);
  TestPool pool(layout, 32);
  TickClock clock;
  std::mt19937 rng(9);
  const TriAttentionStats stats = testing::RandomStats(layout.num_layers, 4, layout.num_kv_heads, layout.head_dim, inv, rng);
  PolicyParams p;
  p.kind = config::CompressionPolicyKind::kTriAttention;
  p.budget = 16;
  p.divide_length = 4;
  p.protect_prompt = true;
  p.prompt_len = 3;
  p.sinks = 0;
  p.window = 0;
  auto policy = CreatePolicy(p, MakeContext(layout, 4, inv, &stats, &clock));
  ASSERT_TRUE(policy.ok()) << policy.status();
  TestSeq seq;
  seq.pool = &pool;
  seq.table = pool.Allocate(24);
  seq.slots = (*policy)->NewSlotState();
  seq.Append(20);
  RecordingKvAccess rec(pool.access());
  RoundInput in = seq.Input();
  in.kv = &rec;
  auto r = (*policy)->Run(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->compacted);
  EXPECT_EQ(rec.compacts, 1);
  EXPECT_EQ(rec.last_new_len, 16);
  EXPECT_EQ(seq.slots.size(), 16);
  ASSERT_FALSE(rec.reads.empty());
  for (const auto& rd : rec.reads) {
    EXPECT_EQ(rd.kv, 0) << "a TriAttention round reads keys only";
    EXPECT_EQ(rd.begin, 3) << "the protected prompt is not read";
    EXPECT_EQ(rd.end, 20);
  }
}

TEST(KvCompressorSeam, QueriesFromTheStepBufferReachEachSequenceOncePerStep) {
  const cache::KvLayout layout = Layout(config::KvDtype::kFp32);
  const std::vector<float> inv = InvFreq(layout.head_dim);
  constexpr int kQHeads = 4;
  TestPool pool(layout, 32);
  TickClock clock;
  const PolicyContext ctx = MakeContext(layout, kQHeads, inv, nullptr, &clock);
  KvCompressor comp(&ctx, pool.access());
  PolicyParams snap;
  snap.kind = config::CompressionPolicyKind::kSnapKv;
  snap.budget = 64;
  snap.window = 3;
  snap.protect_prompt = false;
  PolicyParams full;
  full.kind = config::CompressionPolicyKind::kFull;
  const cache::SeqId a{1}, b{2}, c{3};
  ASSERT_TRUE(comp.Track(a, snap, false, false).ok());
  ASSERT_TRUE(comp.Track(b, full, false, false).ok());
  ASSERT_TRUE(comp.Track(c, snap, false, false).ok());

  // One step: a prefills 4 rows (positions 0..3), b decodes 1, c prefills 2 (positions 0..1).
  const std::vector<int32_t> positions = {0, 1, 2, 3, 7, 0, 1};
  const BatchSeq batch[3] = {{a, 0, 4, 4}, {b, 4, 1, 8}, {c, 5, 2, 2}};
  comp.BeginStep(a, 0, 4, 4);
  comp.BeginStep(c, 0, 2, 2);
  const model::ForwardObservers* obs = comp.PrepareObservers(batch, positions);
  ASSERT_NE(obs, nullptr);
  EXPECT_TRUE(obs->attention_mass.empty()) << "no policy here reads attention mass";
  const int64_t q_size = kQHeads * layout.head_dim;
  const int64_t t = static_cast<int64_t>(positions.size());
  ASSERT_EQ(static_cast<int64_t>(obs->pre_rope_queries.size()), layout.num_layers * t * q_size);
  // What a backend would write: q[layer][row][i] = layer * 1000 + row * 10 + (i % 10).
  for (int l = 0; l < layout.num_layers; ++l)
    for (int64_t r = 0; r < t; ++r)
      for (int64_t i = 0; i < q_size; ++i)
        obs->pre_rope_queries[(l * t + r) * q_size + i] = static_cast<float>(l * 1000 + r * 10 + i % 10);
  comp.FinishObservers();

  // Each snapkv sequence's ring holds its own last rows of every layer, with their positions;
  // the `full` sequence is not tracked.
  EXPECT_EQ(comp.slot_state(b), nullptr);
  for (auto [seq, row_begin, rows] : {std::tuple{a, 0, 4}, std::tuple{c, 5, 2}}) {
    const SlotState* s = comp.slot_state(seq);
    ASSERT_NE(s, nullptr);
    const int kept = std::min(rows, 3);
    for (int l = 0; l < layout.num_layers; ++l) {
      std::vector<float> q(static_cast<size_t>(3 * q_size));
      std::vector<int32_t> qp(3);
      ASSERT_EQ(s->CopyQueries(l, q.data(), qp.data()), kept) << "queries handed over once per step";
      for (int k = 0; k < kept; ++k) {
        const int row = row_begin + rows - kept + k;
        EXPECT_EQ(q[static_cast<size_t>(k * q_size + 3)], static_cast<float>(l * 1000 + row * 10 + 3))
            << "seq " << seq.value() << " layer " << l << " kept row " << k;
        EXPECT_EQ(qp[static_cast<size_t>(k)], positions[static_cast<size_t>(row)]);
      }
    }
  }
  // A step where no tracked sequence observes anything costs no side outputs.
  const BatchSeq only_b[1] = {{b, 0, 1, 9}};
  EXPECT_EQ(comp.PrepareObservers(only_b, std::span<const int32_t>(positions).first(1)), nullptr);
}

}  // namespace
}  // namespace kvserve::compression
