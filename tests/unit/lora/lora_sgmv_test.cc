// The grouped shrink/expand kernels against a float64 reference written from the layout of
// lora_sgmv.h, and their batch invariance (a row's result never depends on the step).
#include "kernels/cpu/lora_sgmv.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/compute_pool.h"

namespace kvserve::kernels::cpu {
namespace {

// One adapter on one stacked projection of `out` rows, with slices (out_begin, out_rows, rank).
struct TestAdapter {
  int in = 0, rank = 0;
  std::vector<float> a_t;  // [in][round_up(rank, 8)]
  std::vector<std::vector<float>> b_t;
  std::vector<LoraSliceWeights> slices;
  LoraWeightsView view() const {
    LoraWeightsView v;
    v.rank = rank;
    v.a_t = a_t.data();
    v.slices = slices.data();
    v.num_slices = static_cast<int32_t>(slices.size());
    return v;
  }
};

TestAdapter MakeAdapter(int in, const std::vector<std::array<int, 3>>& slices, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  TestAdapter t;
  t.in = in;
  for (const auto& s : slices) t.rank += s[2];
  const int stride = (t.rank + 7) / 8 * 8;
  t.a_t.assign(static_cast<size_t>(in) * stride, 0.0f);
  for (int k = 0; k < in; ++k) {
    for (int j = 0; j < t.rank; ++j) t.a_t[static_cast<size_t>(k) * stride + j] = u(gen);
  }
  int rank_begin = 0;
  t.b_t.reserve(slices.size());
  for (const auto& s : slices) {
    t.b_t.emplace_back(static_cast<size_t>(s[1]) * s[2]);
    for (float& v : t.b_t.back()) v = u(gen);
    t.slices.push_back(LoraSliceWeights{s[0], s[1], rank_begin, s[2], t.b_t.back().data()});
    rank_begin += s[2];
  }
  return t;
}

// y[row] + Σ_slices Σ_j (Σ_k x[k] a_t[k][rank_begin + j]) b_t[j][o], in float64; also the sum
// of absolute values of the terms (the rounding bound's scale).
void Reference(const TestAdapter& a, const float* x, const float* y, int out,
               std::vector<double>& want, std::vector<double>& mag) {
  const int stride = (a.rank + 7) / 8 * 8;
  want.assign(y, y + out);
  mag.assign(static_cast<size_t>(out), 0.0);
  for (size_t i = 0; i < static_cast<size_t>(out); ++i) mag[i] = std::abs(y[i]);
  for (const auto& s : a.slices) {
    for (int j = 0; j < s.rank; ++j) {
      double t = 0, tm = 0;
      for (int k = 0; k < a.in; ++k) {
        t += static_cast<double>(x[k]) * a.a_t[static_cast<size_t>(k) * stride + s.rank_begin + j];
        tm += std::abs(static_cast<double>(x[k]) *
                       a.a_t[static_cast<size_t>(k) * stride + s.rank_begin + j]);
      }
      for (int o = 0; o < s.out_rows; ++o) {
        const double b = s.b_t[static_cast<size_t>(j) * s.out_rows + o];
        want[static_cast<size_t>(s.out_begin + o)] += t * b;
        mag[static_cast<size_t>(s.out_begin + o)] += tm * std::abs(b);
      }
    }
  }
}

struct Case {
  int rows, in, out;
  std::vector<TestAdapter> adapters;
  std::vector<int16_t> slots;
  std::vector<float> x, y0;
};

Case MakeCase(int rows, uint64_t seed) {
  Case c;
  c.rows = rows;
  c.in = 72;    // not a multiple of 16
  c.out = 100;  // tails in the expand
  // Ranks 1, 4+4+2 (three slices, like q|k|v), 16, 20 over two slices, and a rank-0 view.
  c.adapters.push_back(MakeAdapter(c.in, {{{0, 100, 1}}}, seed + 1));
  c.adapters.push_back(MakeAdapter(c.in, {{{0, 48, 4}}, {{48, 26, 4}}, {{74, 26, 2}}}, seed + 2));
  c.adapters.push_back(MakeAdapter(c.in, {{{0, 100, 16}}}, seed + 3));
  c.adapters.push_back(MakeAdapter(c.in, {{{3, 37, 12}}, {{60, 40, 8}}}, seed + 4));
  c.adapters.push_back(TestAdapter{});  // leaves the projection alone
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(c.adapters.size()) - 1);
  for (int r = 0; r < rows; ++r) c.slots.push_back(static_cast<int16_t>(pick(gen)));
  c.x.resize(static_cast<size_t>(rows) * c.in);
  c.y0.resize(static_cast<size_t>(rows) * c.out);
  for (float& v : c.x) v = u(gen);
  for (float& v : c.y0) v = u(gen);
  return c;
}

std::vector<float> RunKernel(const Case& c, std::span<const int16_t> slots, const float* x,
                             const float* y0, int rows) {
  std::vector<LoraWeightsView> views;
  for (const auto& a : c.adapters) views.push_back(a.view());
  LoraRowGroups groups;
  groups.Reserve(rows, static_cast<int>(views.size()));
  groups.Build(slots, static_cast<int>(views.size()));
  std::vector<float> scratch(LoraScratchFloats(groups.num_rows(), 24));
  std::vector<float> y(y0, y0 + static_cast<size_t>(rows) * c.out);
  LoraShrinkExpand(groups, views, x, c.in, c.in, y.data(), c.out, scratch);
  return y;
}

TEST(LoraSgmv, MatchesFloat64ReferenceForMixedRanksAndSlices) {
  const Case c = MakeCase(37, 5);
  const std::vector<float> y = RunKernel(c, c.slots, c.x.data(), c.y0.data(), c.rows);
  std::vector<double> want, mag;
  int adapted = 0;
  for (int r = 0; r < c.rows; ++r) {
    const float* yr = y.data() + static_cast<size_t>(r) * c.out;
    const float* y0 = c.y0.data() + static_cast<size_t>(r) * c.out;
    if (c.slots[static_cast<size_t>(r)] < 0) {
      EXPECT_EQ(std::memcmp(yr, y0, sizeof(float) * c.out), 0)
          << "base row " << r << " was written";
      continue;
    }
    ++adapted;
    Reference(c.adapters[static_cast<size_t>(c.slots[static_cast<size_t>(r)])],
              c.x.data() + static_cast<size_t>(r) * c.in, y0, c.out, want, mag);
    for (int o = 0; o < c.out; ++o) {
      // fp32 chains of length in + rank: |err| <= (in + rank + 2) · 2^-24 · Σ|terms|.
      const double bound = (c.in + 24 + 2) * std::ldexp(1.0, -24) * mag[static_cast<size_t>(o)];
      ASSERT_LE(std::abs(yr[o] - want[static_cast<size_t>(o)]), bound)
          << "row " << r << " out " << o;
    }
  }
  EXPECT_GT(adapted, 10);
}

TEST(LoraSgmv, EveryRowGetsBitForBitWhatItGetsAlone) {
  const Case c = MakeCase(29, 9);
  for (int threads : {1, 2}) {
    SetComputeThreads(threads);
    const std::vector<float> batch = RunKernel(c, c.slots, c.x.data(), c.y0.data(), c.rows);
    for (int r = 0; r < c.rows; ++r) {
      const std::vector<float> alone =
          RunKernel(c, std::span<const int16_t>(&c.slots[static_cast<size_t>(r)], 1),
                    c.x.data() + static_cast<size_t>(r) * c.in,
                    c.y0.data() + static_cast<size_t>(r) * c.out, 1);
      ASSERT_EQ(std::memcmp(alone.data(), batch.data() + static_cast<size_t>(r) * c.out,
                            sizeof(float) * c.out),
                0)
          << "row " << r << " threads " << threads;
    }
  }
  SetComputeThreads(1);
}

uint16_t Bf16Bits(float f) {  // truncation: the test only needs bf16-representable values
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
float FromBits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The bf16 path widens exactly and applies the slice scale to t: on bf16-representable
// weights it equals the fp32 path with the scale folded into B, bit for bit, when the scale
// is a power of two (folding is then exact).
TEST(LoraSgmv, Bf16WeightsMatchTheFp32PathBitForBit) {
  Case c = MakeCase(23, 13);
  std::vector<std::vector<uint16_t>> a16, b16;
  std::vector<std::vector<LoraSliceWeights>> slices16;
  std::vector<std::vector<std::vector<float>>> folded;
  std::vector<LoraWeightsView> v32, v16;
  const float scale = 0.5f;
  for (auto& a : c.adapters) {
    for (float& x : a.a_t) x = FromBits(Bf16Bits(x));
    a16.emplace_back();
    for (float x : a.a_t) a16.back().push_back(Bf16Bits(x));
    slices16.emplace_back();
    folded.emplace_back();
    b16.reserve(64);
    for (size_t i = 0; i < a.slices.size(); ++i) {
      std::vector<float>& b = a.b_t[i];
      for (float& x : b) x = FromBits(Bf16Bits(x));
      b16.emplace_back();
      for (float x : b) b16.back().push_back(Bf16Bits(x));
      folded.back().emplace_back(b);
      for (float& x : folded.back().back()) x *= scale;
    }
  }
  size_t bi = 0;
  std::vector<std::vector<LoraSliceWeights>> slices32(c.adapters.size());
  for (size_t i = 0; i < c.adapters.size(); ++i) {
    const TestAdapter& a = c.adapters[i];
    for (size_t k = 0; k < a.slices.size(); ++k) {
      LoraSliceWeights s32 = a.slices[k];
      s32.b_t = folded[i][k].data();
      slices32[i].push_back(s32);
      LoraSliceWeights s16 = a.slices[k];
      s16.b_t = nullptr;
      s16.b_t_bf16 = b16[bi++].data();
      s16.scale = scale;
      slices16[i].push_back(s16);
    }
    LoraWeightsView w32 = a.view(), w16;
    w32.slices = slices32[i].data();
    w16.rank = a.rank;
    w16.a_t_bf16 = a16[i].data();
    w16.slices = slices16[i].data();
    w16.num_slices = w32.num_slices;
    v32.push_back(w32);
    v16.push_back(w16);
  }
  LoraRowGroups g;
  g.Reserve(c.rows, static_cast<int>(v32.size()));
  g.Build(c.slots, static_cast<int>(v32.size()));
  std::vector<float> scratch(LoraScratchFloats(g.num_rows(), 24));
  std::vector<float> y32 = c.y0, y16 = c.y0;
  LoraShrinkExpand(g, v32, c.x.data(), c.in, c.in, y32.data(), c.out, scratch);
  LoraShrinkExpand(g, v16, c.x.data(), c.in, c.in, y16.data(), c.out, scratch);
  EXPECT_EQ(std::memcmp(y32.data(), y16.data(), y32.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(y32.data(), c.y0.data(), y32.size() * sizeof(float)), 0);
}

TEST(LoraSgmv, GroupsAreStableSegmentsAndReuseTheirArrays) {
  LoraRowGroups g;
  g.Reserve(16, 4);
  const int16_t slots[] = {2, -1, 0, 2, -1, 0, 0, 3, 0, 0};
  g.Build(slots, 4);
  ASSERT_EQ(g.num_rows(), 8);
  const std::vector<int32_t> rows(g.rows().begin(), g.rows().end());
  EXPECT_EQ(rows, (std::vector<int32_t>{2, 5, 6, 8, 9, 0, 3, 7}));
  ASSERT_EQ(g.segments().size(), 3u);
  EXPECT_EQ(g.segments()[0].slot, 0);
  EXPECT_EQ(g.segments()[0].end, 5);
  EXPECT_EQ(g.segments()[1].slot, 2);
  EXPECT_EQ(g.segments()[2].slot, 3);
  // Blocks of at most kBlockRows rows, never straddling segments: slot 0's five rows -> 4 + 1.
  ASSERT_EQ(g.blocks().size(), 4u);
  EXPECT_EQ(g.blocks()[1].end - g.blocks()[1].begin, 1);
  const int32_t* before = g.rows().data();
  const int16_t none[] = {-1, -1, -1};
  g.Build(none, 4);
  EXPECT_TRUE(g.empty());
  g.Build(slots, 4);
  EXPECT_EQ(g.rows().data(), before);  // no reallocation within the reserved sizes
}

}  // namespace
}  // namespace kvserve::kernels::cpu
