// RMSNorm, RoPE, SwiGLU and Linear against naive double-precision loops, at several sizes
// (both sides of each kernel's serial/parallel threshold) and thread counts.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace kvserve::kernels::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

class DenseKernels : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { SetComputeThreads(GetParam()); }
  void TearDown() override { SetComputeThreads(0); }
};

TEST_P(DenseKernels, RmsNormMatchesNaive) {
  for (int64_t rows : {1, 3, 40, 400}) {
    const int dim = 96;
    const int64_t stride = dim + 5;
    auto x = Random(static_cast<size_t>(rows * stride), 1);
    auto w = Random(dim, 2);
    std::vector<float> out(static_cast<size_t>(rows * dim));
    RmsNorm(x.data(), stride, w.data(), out.data(), dim, rows, dim, 1e-5f);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[r * stride + i]) * x[r * stride + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) {
        EXPECT_NEAR(out[r * dim + i], x[r * stride + i] * inv * w[i], 1e-5) << "row " << r << " col " << i;
      }
    }
  }
}

TEST_P(DenseKernels, RmsNormInPlace) {
  auto x = Random(2 * 32, 3);
  std::vector<float> w(32, 1.5f);
  std::vector<float> out(64);
  RmsNorm(x.data(), 32, w.data(), out.data(), 32, 2, 32, 1e-6f);
  RmsNorm(x.data(), 32, w.data(), x.data(), 32, 2, 32, 1e-6f);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(x[i], out[i]);
}

TEST_P(DenseKernels, RopeRotateHalfMatchesNaive) {
  const int head_dim = 16, half = 8, heads = 3;
  const int64_t tokens = 100, stride = heads * head_dim + 7;
  std::vector<int32_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(t * 37 % 1000);
  std::vector<float> inv_freq(half);
  for (int f = 0; f < half; ++f) inv_freq[f] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * f / head_dim));
  std::vector<float> cos_sin(tokens * head_dim);
  RopeCosSin(positions.data(), tokens, inv_freq.data(), half, cos_sin.data());
  auto x = Random(static_cast<size_t>(tokens * stride), 4);
  const auto orig = x;
  ApplyRope(x.data(), tokens, heads, head_dim, stride, cos_sin.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* in = orig.data() + t * stride + h * head_dim;
      const float* got = x.data() + t * stride + h * head_dim;
      for (int f = 0; f < half; ++f) {
        const double a = static_cast<double>(positions[t]) * inv_freq[f];
        EXPECT_NEAR(got[f], in[f] * std::cos(a) - in[f + half] * std::sin(a), 1e-5);
        EXPECT_NEAR(got[f + half], in[f + half] * std::cos(a) + in[f] * std::sin(a), 1e-5);
      }
    }
    // Bytes past the heads are untouched.
    for (int64_t i = heads * head_dim; i < stride; ++i) EXPECT_EQ(x[t * stride + i], orig[t * stride + i]);
  }
}

TEST_P(DenseKernels, RopeScoresDependOnRelativePositionOnly) {
  // The property attention relies on: <R(p) q, R(p') k> depends on p - p' only.
  const int head_dim = 32, half = 16;
  std::vector<float> inv_freq(half);
  for (int f = 0; f < half; ++f) inv_freq[f] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * f / head_dim));
  auto q0 = Random(head_dim, 5);
  auto k0 = Random(head_dim, 6);
  auto score = [&](int32_t pq, int32_t pk) {
    std::vector<float> q = q0, k = k0, cs(head_dim);
    RopeCosSin(&pq, 1, inv_freq.data(), half, cs.data());
    ApplyRope(q.data(), 1, 1, head_dim, head_dim, cs.data());
    RopeCosSin(&pk, 1, inv_freq.data(), half, cs.data());
    ApplyRope(k.data(), 1, 1, head_dim, head_dim, cs.data());
    double s = 0;
    for (int i = 0; i < head_dim; ++i) s += static_cast<double>(q[i]) * k[i];
    return s;
  };
  EXPECT_NEAR(score(10, 3), score(1007, 1000), 1e-3);
  EXPECT_NEAR(score(5, 5), score(0, 0), 1e-4);
}

TEST_P(DenseKernels, SiluMulMatchesNaive) {
  for (auto [rows, inter] : {std::pair<int64_t, int>{1, 40}, {2, 20000}, {30, 700}}) {
    auto gu = Random(static_cast<size_t>(rows * 2 * inter), 7, 3.0f);
    std::vector<float> out(static_cast<size_t>(rows * inter));
    SiluMul(gu.data(), rows, inter, out.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int i = 0; i < inter; ++i) {
        const double g = gu[r * 2 * inter + i];
        const double u = gu[r * 2 * inter + inter + i];
        ASSERT_NEAR(out[r * inter + i], g / (1 + std::exp(-g)) * u, 1e-4) << rows << "x" << inter;
      }
    }
  }
}

TEST_P(DenseKernels, LinearMatchesNaive) {
  struct Case {
    int64_t rows;
    int in, out;
    bool bias, accumulate;
  };
  for (const Case& c : {Case{1, 64, 40, false, false}, Case{1, 256, 1000, true, false},
                        Case{3, 128, 300, true, true}, Case{37, 96, 250, false, true},
                        Case{64, 64, 64, true, false}}) {
    const int64_t x_stride = c.in + 3, y_stride = c.out + 2;
    auto x = Random(static_cast<size_t>(c.rows * x_stride), 8);
    auto w = Random(static_cast<size_t>(c.out) * c.in, 9, 0.1f);
    auto b = Random(static_cast<size_t>(c.out), 10);
    auto y = Random(static_cast<size_t>(c.rows * y_stride), 11);
    const auto y0 = y;
    Linear(x.data(), x_stride, w.data(), c.bias ? b.data() : nullptr, y.data(), y_stride, c.rows, c.in, c.out,
           c.accumulate);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int o = 0; o < c.out; ++o) {
        double acc = c.accumulate ? y0[r * y_stride + o] : 0.0;
        if (c.bias) acc += b[o];
        for (int i = 0; i < c.in; ++i) acc += static_cast<double>(x[r * x_stride + i]) * w[o * c.in + i];
        ASSERT_NEAR(y[r * y_stride + o], acc, 1e-4) << "rows " << c.rows << " out " << o;
      }
      // Padding columns stay as they were.
      for (int64_t o = c.out; o < y_stride; ++o) ASSERT_EQ(y[r * y_stride + o], y0[r * y_stride + o]);
    }
  }
}

TEST_P(DenseKernels, PackedLinearMatchesNaive) {
  struct Case {
    int64_t rows;
    int in, out;
    bool bias, accumulate;
  };
  // Rows on both sides of the 4-row (4-panel) and 12-row kernels; outputs with tail panels
  // of every kind (1, 2, 3 panels left over, partial last panel).
  for (const Case& c : {Case{1, 64, 40, false, false}, Case{1, 256, 1000, true, false},
                        Case{3, 128, 300, true, true}, Case{5, 48, 16, false, false},
                        Case{37, 96, 250, false, true}, Case{64, 64, 64, true, false},
                        Case{13, 33, 113, true, true}, Case{200, 192, 384, false, false}}) {
    const int64_t x_stride = c.in + 3, y_stride = c.out + 2;
    auto x = Random(static_cast<size_t>(c.rows * x_stride), 8);
    auto w = Random(static_cast<size_t>(c.out) * c.in, 9, 0.1f);
    auto b = Random(static_cast<size_t>(c.out), 10);
    auto y = Random(static_cast<size_t>(c.rows * y_stride), 11);
    const auto y0 = y;
    std::vector<float> packed(PackedLinearFloats(c.out, c.in));
    PackLinearWeights(w.data(), c.out, c.in, packed.data());
    for (auto* kernel : {&PackedLinear, &internal::PackedLinearPortable}) {
    y = y0;
    kernel(x.data(), x_stride, packed.data(), c.bias ? b.data() : nullptr, y.data(), y_stride, c.rows, c.in, c.out,
           c.accumulate);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int o = 0; o < c.out; ++o) {
        double acc = c.accumulate ? y0[r * y_stride + o] : 0.0;
        if (c.bias) acc += b[o];
        for (int i = 0; i < c.in; ++i) acc += static_cast<double>(x[r * x_stride + i]) * w[o * c.in + i];
        ASSERT_NEAR(y[r * y_stride + o], acc, 1e-4)
            << (kernel == &PackedLinear ? PackedLinearKernelName() : "portable") << " rows " << c.rows << " out " << o;
      }
      for (int64_t o = c.out; o < y_stride; ++o) ASSERT_EQ(y[r * y_stride + o], y0[r * y_stride + o]);
    }
    }
  }
}

TEST_P(DenseKernels, PackedLinearRowDoesNotDependOnTheBatch) {
  // Batch invariance, bit for bit: row r computed alone equals row r of every batch size
  // (different row-kernel sizes, panel groupings and chunkings) at this thread count.
  const int in = 160, out = 600;
  const int64_t max_rows = 40;
  auto x = Random(static_cast<size_t>(max_rows * in), 12);
  auto w = Random(static_cast<size_t>(out) * in, 13, 0.1f);
  auto b = Random(static_cast<size_t>(out), 14);
  std::vector<float> packed(PackedLinearFloats(out, in));
  PackLinearWeights(w.data(), out, in, packed.data());
  for (auto* kernel : {&PackedLinear, &internal::PackedLinearPortable}) {
    std::vector<float> alone(static_cast<size_t>(max_rows * out));
    SetComputeThreads(1);
    for (int64_t r = 0; r < max_rows; ++r) {
      kernel(x.data() + r * in, in, packed.data(), b.data(), alone.data() + r * out, out, 1, in, out, false);
    }
    SetComputeThreads(GetParam());
    for (int64_t rows : {2, 4, 5, 12, 13, 25, 40}) {
      std::vector<float> y(static_cast<size_t>(rows * out));
      kernel(x.data(), in, packed.data(), b.data(), y.data(), out, rows, in, out, false);
      for (int64_t i = 0; i < rows * out; ++i) ASSERT_EQ(y[i], alone[i]) << "rows " << rows << " at " << i;
    }
  }
}

TEST_P(DenseKernels, PackedLinearBf16EqualsFp32OnTheSameValues) {
  // bf16 weights are widened exactly, so the bf16 kernels must equal the fp32 kernels run on
  // the same (bf16-representable) values, bit for bit, for every row-kernel size.
  const int in = 72, out = 150;
  const int64_t rows = 17;
  auto x = Random(static_cast<size_t>(rows * in), 15);
  auto wf = Random(static_cast<size_t>(out) * in, 16, 0.1f);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wf[i], 4);
    wb[i] = static_cast<uint16_t>(bits >> 16);  // truncate: any bf16 value will do
    bits = static_cast<uint32_t>(wb[i]) << 16;
    std::memcpy(&wf[i], &bits, 4);
  }
  std::vector<float> pf(PackedLinearFloats(out, in));
  std::vector<uint16_t> pb(PackedLinearFloats(out, in));
  PackLinearWeights(wf.data(), out, in, pf.data());
  PackLinearWeightsBf16(wb.data(), out, in, pb.data());
  auto b = Random(static_cast<size_t>(out), 17);
  for (int64_t n : {1, 3, 4, 5, 12, 17}) {
    std::vector<float> yf(static_cast<size_t>(n * out)), yb(yf.size()), yfp(yf.size()), ybp(yf.size());
    PackedLinear(x.data(), in, pf.data(), b.data(), yf.data(), out, n, in, out, false);
    PackedLinearBf16(x.data(), in, pb.data(), b.data(), yb.data(), out, n, in, out, false);
    internal::PackedLinearPortable(x.data(), in, pf.data(), b.data(), yfp.data(), out, n, in, out, false);
    internal::PackedLinearBf16Portable(x.data(), in, pb.data(), b.data(), ybp.data(), out, n, in, out, false);
    for (size_t i = 0; i < yf.size(); ++i) {
      ASSERT_EQ(yb[i], yf[i]) << "rows " << n << " at " << i;
      ASSERT_EQ(ybp[i], yfp[i]) << "portable, rows " << n << " at " << i;
      ASSERT_NEAR(yf[i], yfp[i], 1e-4);
    }
  }
}

TEST_P(DenseKernels, PackedLinearFp16EqualsFp32OnTheSameValues) {
  // fp16 weights are widened exactly (subnormals too), so the fp16 kernels must equal the fp32
  // kernels run on the same values, bit for bit, for every row-kernel size.
  const int in = 72, out = 150;
  const int64_t rows = 17;
  auto x = Random(static_cast<size_t>(rows * in), 25);
  auto wf = Random(static_cast<size_t>(out) * in, 26, 0.1f);
  std::vector<uint16_t> wh(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wh[i] = FloatToHalf(wf[i]);
    if (i % 97 == 0) wh[i] = static_cast<uint16_t>(0x0001 + i % 0x3ff);  // subnormals
    if (i % 89 == 0) wh[i] = static_cast<uint16_t>(0x8000 | (0x0200 + i % 0x1ff));  // negative subnormals
    wf[i] = HalfToFloat(wh[i]);
  }
  std::vector<float> pf(PackedLinearFloats(out, in));
  std::vector<uint16_t> ph(PackedLinearFloats(out, in));
  PackLinearWeights(wf.data(), out, in, pf.data());
  PackLinearWeightsFp16(wh.data(), out, in, ph.data());
  auto b = Random(static_cast<size_t>(out), 27);
  for (int64_t n : {1, 3, 4, 5, 12, 17}) {
    std::vector<float> yf(static_cast<size_t>(n * out)), yh(yf.size()), yfp(yf.size()), yhp(yf.size());
    PackedLinear(x.data(), in, pf.data(), b.data(), yf.data(), out, n, in, out, false);
    PackedLinearFp16(x.data(), in, ph.data(), b.data(), yh.data(), out, n, in, out, false);
    internal::PackedLinearPortable(x.data(), in, pf.data(), b.data(), yfp.data(), out, n, in, out, false);
    internal::PackedLinearFp16Portable(x.data(), in, ph.data(), b.data(), yhp.data(), out, n, in, out, false);
    for (size_t i = 0; i < yf.size(); ++i) {
      ASSERT_EQ(yh[i], yf[i]) << "rows " << n << " at " << i;
      ASSERT_EQ(yhp[i], yfp[i]) << "portable, rows " << n << " at " << i;
    }
  }
}

TEST(ComputePool, RunsEveryChunkOnceAndNestedRunsSerially) {
  for (int threads : {1, 2, 4}) {
    ComputePool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t chunks : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(chunks));
      std::atomic<int> bad_slot{0};
      pool.Run(chunks, [&](int64_t c, int slot) {
        if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
        hits[static_cast<size_t>(c)].fetch_add(1);
        if (c == 0) pool.Run(3, [&](int64_t, int inner) { if (inner != 0) bad_slot.fetch_add(1); });
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, " << chunks << " chunks";
      EXPECT_EQ(bad_slot.load(), 0);
    }
  }
}

TEST(ComputePool, ManyShortJobsBackToBack) {
  // Workers fall asleep and wake up between jobs; every job still sees all of its chunks.
  ComputePool pool(3);
  int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.Run(1 + job % 9, [&](int64_t c, int) { sum.fetch_add(c + 1); });
    const int64_t n = 1 + job % 9;
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
    total += sum.load();
    if (job % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(total, 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, DenseKernels, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace kvserve::kernels::cpu
