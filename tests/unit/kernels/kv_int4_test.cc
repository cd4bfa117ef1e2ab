// int4 KV codes (kernels/cpu/kv_quant.h) against direct reference computations: each group's
// stored (step, min) covers the group's [min, max] computed here from the inputs, with step at
// most (max - min) / 15 plus fp16 rounding; per-group value rows and per-channel key blocks
// decode within half a step; streamed key rows within the bound their range widenings allow;
// odd head_dim and constant groups.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels::cpu {
namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Half a stored step plus float rounding of the decode (min + code * step).
float HalfStepBound(const Int4Range& r, float lo, float hi) {
  return 0.5f * r.step * 1.0001f + 1e-6f * std::max(std::abs(lo), std::abs(hi));
}

// The stored range covers [lo, hi] and is no wider than fp16 rounding makes it: min within
// one fp16 step (2^-10 relative) below lo, step within 2^-10 relative (plus the widening the
// lowered min causes) above (hi - lo) / 15.
void ExpectCovers(const Int4Range& r, float lo, float hi) {
  EXPECT_LE(r.min, lo);
  EXPECT_GE(r.min, lo - std::abs(lo) * 0x1p-10f - 0x1p-24f);
  EXPECT_GE(r.min + 15.0f * r.step, hi * (1 - 1e-6f) - 1e-6f);
  const float ideal = (hi - r.min) / 15.0f;
  EXPECT_LE(r.step, ideal * (1 + 0x1p-10f) + 0x1p-24f);
  EXPECT_GE(r.step, ideal * (1 - 1e-6f));
}

TEST(Int4Rows, EveryGroupDecodesWithinHalfItsStep) {
  for (int head_dim : {48, 64, 128, 7}) {
    for (int group : {16, 32, 64}) {
      const int rows = 9;
      const int groups = (head_dim + group - 1) / group;
      std::vector<float> x = Gaussian(static_cast<size_t>(rows) * head_dim, 3 + head_dim + group);
      x[5] = 40.0f;  // an outlier stretches only its own group
      std::vector<std::byte> codes(static_cast<size_t>(rows) * ((head_dim + 1) / 2));
      std::vector<float> scales(static_cast<size_t>(rows) * groups);
      for (int r = 0; r < rows; ++r) {
        QuantizeInt4Row(&x[r * head_dim], head_dim, group, &codes[r * ((head_dim + 1) / 2)], &scales[r * groups]);
      }
      std::vector<float> y(x.size());
      DequantizeInt4Rows(codes.data(), scales.data(), rows, head_dim, group, y.data());
      for (int r = 0; r < rows; ++r) {
        for (int g = 0; g < groups; ++g) {
          const int b = g * group, e = std::min(head_dim, b + group);
          const float lo = *std::min_element(&x[r * head_dim + b], &x[r * head_dim + e]);
          const float hi = *std::max_element(&x[r * head_dim + b], &x[r * head_dim + e]);
          const Int4Range range = UnpackInt4Scale(scales[r * groups + g]);
          ExpectCovers(range, lo, hi);
          for (int i = b; i < e; ++i) {
            ASSERT_LE(std::abs(y[r * head_dim + i] - x[r * head_dim + i]), HalfStepBound(range, lo, hi))
                << "head_dim " << head_dim << " group " << group << " row " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(Int4Rows, ConstantGroupIsExactAndExtremesAreExact) {
  std::vector<float> x(32, 2.5f);
  x[20] = -1.0f;  // second group of 16: min -1, max 2.5 (both exact in fp16)
  std::vector<std::byte> codes(16);
  std::vector<float> scales(2);
  QuantizeInt4Row(x.data(), 32, 16, codes.data(), scales.data());
  std::vector<float> y(32);
  DequantizeInt4Rows(codes.data(), scales.data(), 1, 32, 16, y.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 2.5f) << i;  // step 0: code 0 decodes to min exactly
  EXPECT_EQ(y[20], -1.0f);
  EXPECT_NEAR(y[21], 2.5f, 0.5f * UnpackInt4Scale(scales[1]).step);
}

TEST(Int4Range, PackedFp16CoversAndRoundsOutward) {
  for (auto [lo, hi] : {std::pair{-1.3f, 2.7f}, {30.01f, 31.5f}, {-0.001f, 0.0f}, {0.0f, 0.0f},
                        {-1e-6f, 3e-6f}, {1000.3f, 1000.4f}, {-7.77f, -7.7f}}) {
    const Int4Range r = MakeInt4Range(lo, hi);
    ExpectCovers(r, lo, hi);
    const Int4Range u = UnpackInt4Scale(r.packed);
    EXPECT_EQ(u.step, r.step);
    EXPECT_EQ(u.min, r.min);
  }
}

// Keys: one (block, head) run of block_size rows with per-channel (step, min).
struct KeyRun {
  int block_size, head_dim;
  std::vector<std::byte> codes;
  std::vector<float> scales;
  KeyRun(int bs, int hd)
      : block_size(bs), head_dim(hd), codes(static_cast<size_t>(bs) * ((hd + 1) / 2)), scales(static_cast<size_t>(hd)) {}
  Int4Range Range(int c) const { return UnpackInt4Scale(scales[c]); }
  std::vector<float> Decode(int n) const {
    std::vector<float> y(static_cast<size_t>(n) * head_dim);
    DequantizeInt4ChannelRows(codes.data(), scales.data(), head_dim, 0, n, y.data());
    return y;
  }
};

TEST(Int4Keys, WholeBlockEncodesEachChannelOverItsOwnRange) {
  const int bs = 16, hd = 48;
  std::vector<float> x = Gaussian(static_cast<size_t>(bs) * hd, 7);
  for (int r = 0; r < bs; ++r) x[r * hd + 3] = 30.0f + 0.1f * static_cast<float>(r);  // offset outlier channel
  KeyRun run(bs, hd);
  EXPECT_EQ(WriteInt4ChannelRows(run.codes.data(), run.scales.data(), hd, 0, bs, x.data(), hd), 0);
  const std::vector<float> y = run.Decode(bs);
  for (int c = 0; c < hd; ++c) {
    float lo = x[c], hi = x[c];
    for (int r = 0; r < bs; ++r) {
      lo = std::min(lo, x[r * hd + c]);
      hi = std::max(hi, x[r * hd + c]);
    }
    ExpectCovers(run.Range(c), lo, hi);
    for (int r = 0; r < bs; ++r) {
      ASSERT_LE(std::abs(y[r * hd + c] - x[r * hd + c]), HalfStepBound(run.Range(c), lo, hi))
          << "row " << r << " channel " << c;
    }
  }
  // The outlier channel's narrow range keeps it precise: a per-token scale could not.
  for (int r = 0; r < bs; ++r) EXPECT_NEAR(y[r * hd + 3], x[r * hd + 3], 0.06f);
}

// Decode-time writes: one row per step. Row r is encoded with the range of rows [0, r] and
// re-encoded at each later widening: at most (block_size - 1 - r) more half steps of the
// final range, each no larger than the final step.
TEST(Int4Keys, StreamedRowsStayWithinTheirWideningBound) {
  const int bs = 16, hd = 32;
  const std::vector<float> x = Gaussian(static_cast<size_t>(bs) * hd, 11);
  KeyRun run(bs, hd);
  int widened = 0;
  for (int r = 0; r < bs; ++r) {
    widened += WriteInt4ChannelRows(run.codes.data(), run.scales.data(), hd, r, 1, &x[r * hd], hd);
    // Every row written so far decodes within the bound of the range so far.
    const std::vector<float> y = run.Decode(r + 1);
    for (int c = 0; c < hd; ++c) {
      const float step = run.Range(c).step;
      for (int i = 0; i <= r; ++i) {
        ASSERT_LE(std::abs(y[i * hd + c] - x[i * hd + c]), 0.5f * step * (r - i + 1) * 1.0001f + 1e-6f)
            << "after row " << r << ": row " << i << " channel " << c;
      }
    }
  }
  EXPECT_GT(widened, hd) << "gaussian rows widen most channels more than once";
  // The final range covers the block's min and max per channel (widened stepwise, so up to a
  // few fp16 roundings wider than one fresh encoding).
  for (int c = 0; c < hd; ++c) {
    float lo = x[c], hi = x[c];
    for (int r = 0; r < bs; ++r) {
      lo = std::min(lo, x[r * hd + c]);
      hi = std::max(hi, x[r * hd + c]);
    }
    const Int4Range range = run.Range(c);
    EXPECT_LE(range.min, lo);
    EXPECT_GE(range.min + 15.0f * range.step, hi * (1 - 1e-6f) - 1e-6f);
    EXPECT_LE(range.step, (hi - lo) / 15.0f * 1.02f + 1e-4f);
  }
}

TEST(Int4Keys, RowsInsideTheRangeLeaveEarlierCodesAlone) {
  const int bs = 8, hd = 6;
  std::vector<float> first{-1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1};  // rows 0, 1: range [-1, 1]
  KeyRun run(bs, hd);
  WriteInt4ChannelRows(run.codes.data(), run.scales.data(), hd, 0, 2, first.data(), hd);
  const std::vector<std::byte> codes = run.codes;
  const std::vector<float> inside{0.5f, -0.5f, 0.0f, 0.9f, -0.9f, 0.2f};
  EXPECT_EQ(WriteInt4ChannelRows(run.codes.data(), run.scales.data(), hd, 2, 1, inside.data(), hd), 0);
  for (size_t i = 0; i < 2 * 3; ++i) EXPECT_EQ(codes[i], run.codes[i]) << "byte " << i;  // rows 0 and 1
  const std::vector<float> y = run.Decode(3);
  for (int c = 0; c < hd; ++c) EXPECT_LE(std::abs(y[2 * hd + c] - inside[c]), 0.5f * run.Range(c).step * 1.0001f);
}

}  // namespace
}  // namespace kvserve::kernels::cpu
