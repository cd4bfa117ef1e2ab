// QuantizeRows -> DequantizeRows round trips stay within each quantizer's documented error
// bound (the file header of quant/blocks/<type>.cc states it; the formulas are repeated in
// Bound() below), on Gaussian rows of several scales, rows with outliers, one-signed rows,
// all-zero and constant rows, and rows small enough that the fp16 scales go subnormal.
// Quantizing is deterministic, and an all-zero row decodes to zeros.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "quant/block_type.h"

namespace kvserve::quant {
namespace {

constexpr int64_t kN = 1024;  // a multiple of 32 and 256

double MaxAbs(const float* x, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
  return m;
}
// max(0, max x) - min(0, min x): the range an affine (scale, min) sub-block must cover.
double RangeWithZero(const float* x, int n) {
  double lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  return hi - lo;
}

// The documented bound on |x - y| for element i of `block` (block_elements floats).
double Bound(BlockType type, const float* block, int i) {
  const double amax = MaxAbs(block, Traits(type).block_elements);
  const double n = Traits(type).block_elements;
  double lo = 0, hi = 0;  // the block's min and max
  for (int k = 0; k < n; ++k) {
    lo = std::min(lo, k == 0 ? block[0] : static_cast<double>(block[k]));
    hi = std::max(hi, k == 0 ? block[0] : static_cast<double>(block[k]));
  }
  switch (type) {
    case BlockType::kQ4_0:
      return amax / 7.9 + std::ldexp(1.0, -21);
    case BlockType::kQ5_0:
      return amax / 15.5 + std::ldexp(1.0, -20);
    case BlockType::kQ4_1:
      return (hi - lo) / 29.9 + amax / 16000 + std::ldexp(1.0, -23);
    case BlockType::kQ5_1:
      return (hi - lo) / 61.8 + amax / 32000 + std::ldexp(1.0, -23);
    case BlockType::kQ8_0:
      return amax / 225 + std::ldexp(1.0, -18);
    case BlockType::kQ2_K: {
      const float* sub = block + i / 16 * 16;
      return RangeWithZero(sub, 16) / 6 + amax / 29 + std::ldexp(1.0, -22);
    }
    case BlockType::kQ3_K: {
      const float* sub = block + i / 16 * 16;
      return MaxAbs(sub, 16) / 6 + amax / 180 + std::ldexp(1.0, -24);
    }
    case BlockType::kQ5_K: {
      const float* sub = block + i / 32 * 32;
      return RangeWithZero(sub, 32) / 62 + amax / 1250 + std::ldexp(1.0, -22);
    }
    case BlockType::kIQ4_NL:
      return amax / 9 + std::ldexp(1.0, -20);
    case BlockType::kIQ4_XS: {
      const float* sub = block + i / 32 * 32;
      return MaxAbs(sub, 32) / 9 + amax / 280 + std::ldexp(1.0, -20);
    }
    case BlockType::kMXFP4:
      return amax / 4 + std::ldexp(1.0, -126);
    case BlockType::kQ4_K: {
      const float* sub = block + i / 32 * 32;
      return RangeWithZero(sub, 32) / 30 + amax / 600 + std::ldexp(1.0, -22);
    }
    case BlockType::kQ6_K: {
      const float* sub = block + i / 16 * 16;
      return MaxAbs(sub, 16) / 62 + amax / 7000 + std::ldexp(1.0, -24);
    }
    default:
      ADD_FAILURE() << "no documented bound for " << Traits(type).name;
      return 0;
  }
}

struct RowCase {
  std::string name;
  std::function<float(std::mt19937&, int64_t)> gen;
};

std::vector<RowCase> RowCases() {
  auto gauss = [](double sigma) {
    return [sigma](std::mt19937& rng, int64_t) {
      return static_cast<float>(std::normal_distribution<double>(0, sigma)(rng));
    };
  };
  auto constant = [](float v) { return [v](std::mt19937&, int64_t) { return v; }; };
  return {
      {"gauss_1", gauss(1.0)},
      {"gauss_0.02", gauss(0.02)},
      {"gauss_1000", gauss(1000.0)},
      {"gauss_1e-5", gauss(1e-5)},  // fp16 subnormal scales
      {"outliers",
       [](std::mt19937& rng, int64_t i) {
         const double v = std::normal_distribution<double>(0, 0.02)(rng);
         return static_cast<float>(i % 97 == 5 ? v * 60 : v);
       }},
      {"positive", [](std::mt19937& rng,
                      int64_t) { return std::uniform_real_distribution<float>(0.5f, 1.0f)(rng); }},
      {"negative",
       [](std::mt19937& rng, int64_t) {
         return std::uniform_real_distribution<float>(-1.0f, -0.5f)(rng);
       }},
      {"zero", constant(0.0f)},
      {"const_0.37", constant(0.37f)},
      {"const_-2.5", constant(-2.5f)},
      {"const_1e-3", constant(1e-3f)},
  };
}

class QuantizeTest : public ::testing::TestWithParam<BlockType> {};

TEST_P(QuantizeTest, RoundTripWithinDocumentedBound) {
  const BlockTraits& t = Traits(GetParam());
  const int64_t rows = 3;
  const int64_t bytes = *RowBytes(t.type, kN) * rows;
  std::vector<float> x(static_cast<size_t>(rows * kN)), y(x.size());
  std::vector<std::byte> q(static_cast<size_t>(bytes)), q2(q.size());
  for (const RowCase& rc : RowCases()) {
    SCOPED_TRACE(rc.name);
    std::mt19937 rng(99);
    for (int64_t i = 0; i < rows * kN; ++i) x[i] = rc.gen(rng, i);
    QuantizeRows(t.type, x.data(), rows, kN, q.data());
    QuantizeRows(t.type, x.data(), rows, kN, q2.data());
    EXPECT_EQ(std::memcmp(q.data(), q2.data(), q.size()), 0) << "not deterministic";
    DequantizeRows(t.type, q.data(), rows, kN, y.data());
    int failures = 0;
    double worst = 0;  // largest error / bound seen
    for (int64_t i = 0; i < rows * kN; ++i) {
      const float* block = x.data() + i / t.block_elements * t.block_elements;
      const double bound = Bound(t.type, block, static_cast<int>(i % t.block_elements));
      const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && failures++ < 5) {
        ADD_FAILURE() << t.name << " element " << i << ": x " << x[i] << " y " << y[i] << " error "
                      << err << " > bound " << bound;
      }
    }
    if (rc.name == "zero") {
      for (float v : y) ASSERT_EQ(v, 0.0f);
    }
    RecordProperty(std::string(t.name) + "_" + rc.name + "_worst_error_over_bound",
                   std::to_string(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantized, QuantizeTest,
                         ::testing::Values(BlockType::kQ4_0, BlockType::kQ4_1, BlockType::kQ5_0,
                                           BlockType::kQ5_1, BlockType::kQ8_0, BlockType::kQ2_K,
                                           BlockType::kQ3_K, BlockType::kQ4_K, BlockType::kQ5_K,
                                           BlockType::kQ6_K, BlockType::kIQ4_NL, BlockType::kIQ4_XS,
                                           BlockType::kMXFP4),
                         [](const ::testing::TestParamInfo<BlockType>& p) {
                           return std::string(Traits(p.param).name);
                         });

// Inputs beyond what a type's fp16 scales can hold (|x| up to 3e38) and binary32 denormals are
// outside the documented bounds, but still quantize deterministically into valid blocks that
// decode to finite values (the scales saturate); the sanitizer builds check no step is
// undefined (e.g. float-to-int conversions of out-of-range quotients).
TEST_P(QuantizeTest, ExtremeInputsDecodeToFiniteValues) {
  const BlockTraits& t = Traits(GetParam());
  std::vector<float> x(static_cast<size_t>(kN));
  std::mt19937 rng(7);
  for (int64_t i = 0; i < kN; ++i) {
    const int kind = static_cast<int>(i / 256);  // one super-block per kind
    const float u = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    x[i] = kind == 0 ? u * 3e38f : kind == 1 ? u * 1e-40f : kind == 2 ? u * 1e9f : u;
  }
  x[300] = -3.4e38f;
  std::vector<std::byte> q(static_cast<size_t>(*RowBytes(t.type, kN))), q2(q.size());
  QuantizeRows(t.type, x.data(), 1, kN, q.data());
  QuantizeRows(t.type, x.data(), 1, kN, q2.data());
  EXPECT_EQ(std::memcmp(q.data(), q2.data(), q.size()), 0);
  std::vector<float> y(x.size());
  DequantizeRows(t.type, q.data(), 1, kN, y.data());
  for (int64_t i = 0; i < kN; ++i) ASSERT_TRUE(std::isfinite(y[i])) << t.name << " " << i;
  // The ordinary last super-block is unaffected by its neighbours.
  for (int64_t i = 768; i < kN; ++i) {
    const float* block = x.data() + i / t.block_elements * t.block_elements;
    EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]),
              Bound(t.type, block, static_cast<int>(i % t.block_elements)))
        << t.name << " " << i;
  }
}

// F16 / BF16 "quantize" to the nearest code (ties to even): no neighbouring code is closer.
TEST(QuantizeTest, HalfAndBf16RoundToNearest) {
  std::mt19937 rng(5);
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 26);  // subnormals too
    x[i] = std::uniform_real_distribution<float>(-mag, mag)(rng);
  }
  std::vector<uint16_t> h(x.size());
  for (BlockType type : {BlockType::kF16, BlockType::kBF16}) {
    QuantizeRows(type, x.data(), 1, static_cast<int64_t>(x.size()),
                 reinterpret_cast<std::byte*>(h.data()));
    std::vector<float> y(x.size());
    DequantizeRows(type, reinterpret_cast<const std::byte*>(h.data()), 1,
                   static_cast<int64_t>(x.size()), y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
      for (int step : {-1, 1}) {
        const uint16_t nb = static_cast<uint16_t>(h[i] + step);
        float other;
        DequantizeRows(type, reinterpret_cast<const std::byte*>(&nb), 1, 1, &other);
        if (!std::isfinite(other)) continue;
        EXPECT_LE(err, std::fabs(static_cast<double>(x[i]) - other))
            << Traits(type).name << " x " << x[i];
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::quant
