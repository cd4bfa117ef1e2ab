// kernels/cpu/kv_compact: in-place compaction is a permutation of the kept rows (checked row
// by row and by per-(layer, head) checksums) in every KV dtype, moves the side arrays with the
// rows, leaves other sequences' blocks alone and frees exactly the trailing blocks.
#include "kernels/cpu/kv_compact.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "compression_test_util.h"
#include "config/fields.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels::cpu {
namespace {

using compression::testing::Fnv;
using compression::testing::TestPool;

cache::KvLayout Layout(config::KvDtype dtype) {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 3;
  l.head_dim = 8;
  l.block_size = 4;
  l.dtype = dtype;
  return l;
}

// Random strictly ascending keep lists of k slots from [lo, end) for each of `rows` rows.
std::vector<int32_t> RandomKeep(int64_t rows, int64_t lo, int64_t end, int64_t k, std::mt19937& rng) {
  std::vector<int32_t> keep;
  std::vector<int32_t> cand(static_cast<size_t>(end - lo));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(cand.begin(), cand.end(), static_cast<int32_t>(lo));
    std::shuffle(cand.begin(), cand.end(), rng);
    std::vector<int32_t> pick(cand.begin(), cand.begin() + k);
    std::sort(pick.begin(), pick.end());
    keep.insert(keep.end(), pick.begin(), pick.end());
  }
  return keep;
}

class KvCompactTest : public ::testing::TestWithParam<config::KvDtype> {};

TEST_P(KvCompactTest, KeptRowsArePermutedIntoPlaceAndNothingElseChanges) {
  const cache::KvLayout layout = Layout(GetParam());
  TestPool pool(layout, 40);
  const int64_t len_a = 45, len_b = 30;
  const std::vector<int32_t> table_a = pool.Allocate(len_a);
  const std::vector<int32_t> table_b = pool.Allocate(len_b);
  pool.FillRandom(table_a, len_a);
  pool.FillRandom(table_b, len_b);
  const std::vector<std::byte> b_before = pool.BlockBytes(table_b);

  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  // Snapshot of every (layer, kv, head, slot) row of A.
  auto snap = [&](int l, int kv, int h, int64_t i) { return pool.RawRow(table_a, l, kv, h, i); };
  std::vector<std::vector<std::vector<std::byte>>> before(static_cast<size_t>(rows * 2));
  for (int l = 0; l < layout.num_layers; ++l)
    for (int h = 0; h < layout.num_kv_heads; ++h)
      for (int kv = 0; kv < 2; ++kv)
        for (int64_t i = 0; i < len_a; ++i) before[((l * layout.num_kv_heads + h) * 2 + kv)].push_back(snap(l, kv, h, i));

  // Side arrays: a distinct int per (row, slot) and a float mass.
  const int64_t stride = 50;
  std::vector<int32_t> pos(static_cast<size_t>(rows * stride));
  std::vector<float> mass(static_cast<size_t>(rows * stride));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < stride; ++i) {
      pos[r * stride + i] = static_cast<int32_t>(1000 * r + i);
      mass[r * stride + i] = 0.5f * static_cast<float>(i) + static_cast<float>(r);
    }
  const std::vector<int32_t> pos0 = pos;
  const std::vector<float> mass0 = mass;
  const SlotSideArray side[2] = {{reinterpret_cast<std::byte*>(pos.data()), stride, 4},
                                 {reinterpret_cast<std::byte*>(mass.data()), stride, 4}};

  const int64_t lo = 5, scored_end = 40, k = 20;
  const std::vector<int32_t> keep = RandomKeep(rows, lo, scored_end, k, pool.rng());
  const KeepPlan plan{lo, scored_end, len_a, k, keep.data()};
  ASSERT_TRUE(ValidateKeepPlan(layout, static_cast<int64_t>(table_a.size()), plan).ok());

  // Source index of each destination, per row: prefix, kept, tail.
  auto source_of = [&](int64_t r, int64_t i) -> int64_t {
    if (i < lo) return i;
    if (i < lo + k) return keep[r * k + (i - lo)];
    return scored_end + (i - lo - k);
  };
  int64_t expect_moved = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < plan.new_len(); ++i) expect_moved += source_of(r, i) != i;

  const CompactStats st = CompactKv(layout, pool.layer_data().data(),
                                    layout.has_scales() ? pool.layer_scales().data() : nullptr, table_a.data(), plan,
                                    side, 2);
  EXPECT_EQ(st.new_len, lo + k + (len_a - scored_end));
  EXPECT_EQ(st.rows_moved, expect_moved);
  const int64_t row_bytes = layout.head_dim * static_cast<int64_t>(layout.elem_bytes()) + (layout.has_scales() ? 4 : 0);
  EXPECT_EQ(st.bytes_moved, expect_moved * 2 * row_bytes);

  for (int l = 0; l < layout.num_layers; ++l) {
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      const int64_t r = static_cast<int64_t>(l) * layout.num_kv_heads + h;
      for (int kv = 0; kv < 2; ++kv) {
        uint64_t want = Fnv({}), got = Fnv({});
        for (int64_t i = 0; i < st.new_len; ++i) {
          const auto& src = before[(r * 2 + kv)][source_of(r, i)];
          const auto now = snap(l, kv, h, i);
          ASSERT_EQ(now, src) << "layer " << l << " head " << h << " kv " << kv << " slot " << i;
          want = Fnv(src, want);
          got = Fnv(now, got);
        }
        EXPECT_EQ(got, want) << "checksum of (layer " << l << ", head " << h << ")";
      }
      for (int64_t i = 0; i < st.new_len; ++i) {
        EXPECT_EQ(pos[r * stride + i], pos0[r * stride + source_of(r, i)]);
        EXPECT_EQ(mass[r * stride + i], mass0[r * stride + source_of(r, i)]);
      }
    }
  }
  EXPECT_EQ(pool.BlockBytes(table_b), b_before) << "another sequence's blocks changed";
  // Blocks freed = drop in blocks held.
  const int64_t bs = layout.block_size;
  EXPECT_EQ((len_a + bs - 1) / bs - (st.new_len + bs - 1) / bs, 12 - 8);
}

TEST_P(KvCompactTest, IdentityPlanMovesNothing) {
  const cache::KvLayout layout = Layout(GetParam());
  TestPool pool(layout, 20);
  const std::vector<int32_t> table = pool.Allocate(33);
  pool.FillRandom(table, 33);
  const auto all = pool.AllBytes();
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  // Keep the first 10 candidates of every row: the identity prefix; only the tail moves.
  std::vector<int32_t> keep;
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t i = 0; i < 10; ++i) keep.push_back(4 + i);
  const KeepPlan keep_all{4, 14, 14, 10, keep.data()};
  CompactStats st = CompactKv(layout, pool.layer_data().data(), pool.layer_scales().data(), table.data(), keep_all,
                              nullptr, 0);
  EXPECT_EQ(st.rows_moved, 0);
  EXPECT_EQ(st.new_len, 14);
  EXPECT_EQ(pool.AllBytes(), all);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, KvCompactTest, ::testing::ValuesIn(compression::testing::kAllDtypes),
                         [](const auto& p) { return std::string(config::Name(p.param)); });

// Split K/V dtypes, int4 included: rows stored per row (every V dtype, K unless int4) move
// byte for byte; int4 keys are re-encoded per destination block, each decoded row within half
// a step (of its new block's channel range) of what it decoded to before.
constexpr config::KvDtype kPrecisions[] = {config::KvDtype::kFp32, config::KvDtype::kFp16,
                                           config::KvDtype::kBf16, config::KvDtype::kFp8E4M3,
                                           config::KvDtype::kInt8, config::KvDtype::kInt4};

class KvCompactSplitTest : public ::testing::TestWithParam<std::tuple<config::KvDtype, config::KvDtype>> {};

TEST_P(KvCompactSplitTest, RowsMoveIntactOrWithinTheirNewEncoding) {
  const auto [kd, vd] = GetParam();
  cache::KvLayout layout = cache::WithPrecision(Layout(kd), kd, vd, 4);
  layout.head_dim = 10;  // int4: an even row of two value groups of 4 and one of 2
  TestPool pool(layout, 40);
  const int64_t len_a = 45, len_b = 30;
  const std::vector<int32_t> table_a = pool.Allocate(len_a);
  const std::vector<int32_t> table_b = pool.Allocate(len_b);
  pool.FillRandom(table_a, len_a);
  pool.FillRandom(table_b, len_b);
  const std::vector<std::byte> b_before = pool.BlockBytes(table_b);
  const int nl = layout.num_layers, nh = layout.num_kv_heads;
  std::vector<std::vector<std::byte>> raw_before;
  std::vector<std::vector<float>> k_before;
  for (int l = 0; l < nl; ++l)
    for (int h = 0; h < nh; ++h)
      for (int64_t i = 0; i < len_a; ++i) {
        raw_before.push_back(pool.RawRow(table_a, l, 0, h, i));
        raw_before.push_back(pool.RawRow(table_a, l, 1, h, i));
        k_before.push_back(pool.Read(table_a, l, 0, h, i));
      }
  const int64_t rows = static_cast<int64_t>(nl) * nh;
  const int64_t lo = 5, scored_end = 40, k = 20;
  const std::vector<int32_t> keep = RandomKeep(rows, lo, scored_end, k, pool.rng());
  const KeepPlan plan{lo, scored_end, len_a, k, keep.data()};
  ASSERT_TRUE(ValidateKeepPlan(layout, static_cast<int64_t>(table_a.size()), plan).ok());
  const CompactStats st = CompactKv(layout, pool.layer_data().data(),
                                    layout.has_scales() ? pool.layer_scales().data() : nullptr, table_a.data(), plan,
                                    nullptr, 0);
  auto source_of = [&](int64_t r, int64_t i) -> int64_t {
    if (i < lo) return i;
    if (i < lo + k) return keep[r * k + (i - lo)];
    return scored_end + (i - lo - k);
  };
  for (int l = 0; l < nl; ++l) {
    for (int h = 0; h < nh; ++h) {
      const int64_t r = static_cast<int64_t>(l) * nh + h;
      for (int64_t i = 0; i < st.new_len; ++i) {
        const int64_t src = source_of(r, i);
        ASSERT_EQ(pool.RawRow(table_a, l, 1, h, i), raw_before[(r * len_a + src) * 2 + 1]) << "V slot " << i;
        if (kd != config::KvDtype::kInt4) {
          ASSERT_EQ(pool.RawRow(table_a, l, 0, h, i), raw_before[(r * len_a + src) * 2]) << "K slot " << i;
          continue;
        }
        const std::vector<float> now = pool.Read(table_a, l, 0, h, i);
        const int64_t block = table_a[i / layout.block_size];
        const float* scales = pool.layer_scales()[l] + layout.run_scale_offset(block, 0, h);
        for (int c = 0; c < layout.head_dim; ++c) {
          const float want = k_before[r * len_a + src][c];
          ASSERT_LE(std::abs(now[c] - want), 0.5f * UnpackInt4Scale(scales[c]).step * 1.0001f + 1e-6f)
              << "K slot " << i << " channel " << c << " (from slot " << src << ")";
        }
      }
    }
  }
  if (kd == config::KvDtype::kInt4) EXPECT_GT(st.rows_recoded, 0);
  EXPECT_EQ(pool.BlockBytes(table_b), b_before) << "another sequence's blocks changed";
}

INSTANTIATE_TEST_SUITE_P(Pairs, KvCompactSplitTest,
                         ::testing::Combine(::testing::ValuesIn(kPrecisions), ::testing::ValuesIn(kPrecisions)),
                         [](const auto& p) {
                           return std::string(config::Name(std::get<0>(p.param))) + "_" +
                                  std::string(config::Name(std::get<1>(p.param)));
                         });

TEST(KvCompactValidate, RejectsBadPlans) {
  const cache::KvLayout layout = Layout(config::KvDtype::kFp32);
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  std::vector<int32_t> keep;
  for (int64_t r = 0; r < rows; ++r) keep.insert(keep.end(), {5, 7, 9});
  KeepPlan p{4, 12, 14, 3, keep.data()};
  EXPECT_TRUE(ValidateKeepPlan(layout, 4, p).ok());
  EXPECT_FALSE(ValidateKeepPlan(layout, 3, p).ok()) << "table too short for 14 slots";
  keep[4] = 5;  // row 1: 5, 5, 9
  EXPECT_FALSE(ValidateKeepPlan(layout, 4, p).ok()) << "duplicate";
  keep[4] = 12;
  EXPECT_FALSE(ValidateKeepPlan(layout, 4, p).ok()) << "out of order / past scored_end";
  keep[4] = 7;
  keep[0] = 3;
  EXPECT_FALSE(ValidateKeepPlan(layout, 4, p).ok()) << "below lo";
  keep[0] = 5;
  p.num_keep = 9;
  EXPECT_FALSE(ValidateKeepPlan(layout, 4, p).ok()) << "more than the candidates";
  p = {4, 3, 14, 0, nullptr};
  EXPECT_FALSE(ValidateKeepPlan(layout, 4, p).ok()) << "scored_end < lo";
}

}  // namespace
}  // namespace kvserve::kernels::cpu
