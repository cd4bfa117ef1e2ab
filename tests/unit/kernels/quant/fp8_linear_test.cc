// FP8 (e4m3fn) segments of QuantLinear (kernels/cpu/quant/fp8_format.h) against a float64
// product of x and the weights decoded from the e4m3 definition (tests/support/hf_models/
// fp8_e4m3.h, written independently of the kernels' bit moves), within the fp32 bound that
// fp8_format.h states. Also: every byte value widens exactly; the portable, AVX2 and AVX-512
// kernels agree bit for bit; each row's result is the same in every batch shape.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include "kernels/cpu/quant/fp8_segment.h"
#include "kernels/cpu/quant/quant_linear.h"
#include "tests/support/hf_models/fp8_e4m3.h"

namespace kvserve::kernels::cpu::quant {
namespace {

using testing::hf::E4m3IsNaN;
using testing::hf::E4m3Value;

using LinearFn = void (*)(const float*, int64_t, const QuantMatrix&, const float*, float*, int64_t,
                          int64_t, bool);

struct Isa {
  const char* name;
  LinearFn fn;
};

std::vector<Isa> Isas() {
  std::vector<Isa> v = {{"default", &QuantLinear}, {"portable", &internal::QuantLinearPortable}};
  if (internal::HasAvx2Kernels()) v.push_back({"avx2", &internal::QuantLinearAvx2});
  return v;
}

int64_t KBlocks(int64_t in) { return (in + 127) / 128; }

struct Fp8Fixture {
  int64_t out, in;
  std::vector<uint8_t> codes;  // [out][in]
  std::vector<float> scales;   // [out][KBlocks(in)]
  QuantMatrix Pack() const {
    QuantSource src{};
    src.data = reinterpret_cast<const std::byte*>(codes.data());
    src.rows = out;
    src.row_stride = in;
    src.fp8_scales = scales.data();
    auto m = QuantMatrix::Pack({&src, 1}, in);
    EXPECT_TRUE(m.ok()) << m.status();
    return std::move(*m);
  }
  double W(int64_t o, int64_t k) const {
    return E4m3Value(codes[o * in + k]) * scales[o * KBlocks(in) + k / 128];
  }
};

Fp8Fixture RandomFixture(int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp8Fixture f{out, in, {}, {}};
  f.codes.resize(out * in);
  for (uint8_t& c : f.codes) {
    do {
      c = static_cast<uint8_t>(rng());
    } while (E4m3IsNaN(c));
  }
  std::uniform_real_distribution<float> s(0.5f, 2.0f);
  f.scales.resize(out * KBlocks(in));
  // Scales of different magnitudes per block, as amax / 448 gives them.
  for (float& v : f.scales) v = std::ldexp(s(rng), static_cast<int>(rng() % 9) - 12);
  return f;
}

TEST(Fp8Linear, EveryByteWidensExactly) {
  // Row b holds byte b in column 0 (0 for the two NaN bytes), x = e_0: y[b] = value(b) * s.
  Fp8Fixture f{256, 3, std::vector<uint8_t>(256 * 3, 0), std::vector<float>(256)};
  for (int b = 0; b < 256; ++b) {
    if (!E4m3IsNaN(static_cast<uint8_t>(b))) f.codes[b * 3] = static_cast<uint8_t>(b);
  }
  for (const float scale : {1.0f, 0x1p-9f, 3.0f}) {
    for (float& s : f.scales) s = scale;
    const QuantMatrix m = f.Pack();
    const float x[3] = {1.0f, 0.0f, 0.0f};
    for (const Isa& isa : Isas()) {
      std::vector<float> y(256, -1.0f);
      isa.fn(x, 3, m, nullptr, y.data(), 256, 1, false);
      for (int b = 0; b < 256; ++b) {
        if (E4m3IsNaN(static_cast<uint8_t>(b))) continue;
        EXPECT_EQ(y[b], static_cast<float>(E4m3Value(static_cast<uint8_t>(b)) * scale))
            << isa.name << " byte 0x" << std::hex << b << " scale " << scale;
      }
    }
  }
}

#if defined(__x86_64__)
// The widening's subnormal codes pass through IEEE halves, which vcvtph2ps converts exactly
// whatever MXCSR's denormals-are-zero and flush-to-zero say (fp8_format.h): with both set, every
// byte still widens exactly (a kernel that made fp32 subnormals would lose codes 0x01..0x07).
TEST(Fp8Linear, EveryByteWidensExactlyUnderDaz) {
  Fp8Fixture f{256, 1, std::vector<uint8_t>(256, 0), std::vector<float>(256, 1.0f)};
  for (int b = 0; b < 256; ++b) {
    if (!E4m3IsNaN(static_cast<uint8_t>(b))) f.codes[b] = static_cast<uint8_t>(b);
  }
  const QuantMatrix m = f.Pack();
  const float x[1] = {1.0f};
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // DAZ (bit 6) and FTZ (bit 15)
  std::vector<std::vector<float>> got;
  for (const Isa& isa : Isas()) {
    got.emplace_back(256, -1.0f);
    isa.fn(x, 1, m, nullptr, got.back().data(), 256, 1, false);
  }
  _mm_setcsr(saved);
  for (size_t i = 0; i < got.size(); ++i) {
    for (int b = 0; b < 256; ++b) {
      if (E4m3IsNaN(static_cast<uint8_t>(b))) continue;
      EXPECT_EQ(got[i][b], static_cast<float>(E4m3Value(static_cast<uint8_t>(b))))
          << Isas()[i].name << " byte 0x" << std::hex << b;
    }
  }
}
#endif

TEST(Fp8Linear, MatchesFloat64EveryShapeAndKernelsAgree) {
  // 50 outputs (a ragged panel), 300 inputs (two blocks and a ragged 44), block scales.
  const Fp8Fixture f = RandomFixture(50, 300, 7);
  const QuantMatrix m = f.Pack();
  EXPECT_EQ(m.out_features(), 50);
  EXPECT_EQ(m.in_features(), 300);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  constexpr int64_t kMaxRows = 70, kStride = 301;  // x rows padded: the kernels stop at `in`
  std::vector<float> x(kMaxRows * kStride), bias(50), y_init(kMaxRows * 50);
  for (float& v : x) v = u(rng);
  for (float& v : bias) v = u(rng);
  for (float& v : y_init) v = u(rng);
  const double n_steps = 64 + KBlocks(300) + 4;
  std::vector<float> single;  // rows=1 result of each row (batch invariance)
  for (const bool accumulate : {false, true}) {
    std::vector<std::vector<float>> first_isa;
    for (const Isa& isa : Isas()) {
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 70}) {
        std::vector<float> y(y_init.begin(), y_init.begin() + rows * 50);
        isa.fn(x.data(), kStride, m, bias.data(), y.data(), 50, rows, accumulate);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < 50; ++o) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < 300; ++k) {
              ref += f.W(o, k) * x[r * kStride + k];
              mag += std::fabs(f.W(o, k) * x[r * kStride + k]);
            }
            const double pre = (accumulate ? y_init[r * 50 + o] : 0.0) + bias[o];
            const double tol =
                n_steps * 0x1p-24 * mag + 2 * 0x1p-24 * (std::fabs(ref) + std::fabs(pre)) + 1e-30;
            EXPECT_NEAR(y[r * 50 + o], ref + pre, tol)
                << isa.name << " rows " << rows << " row " << r << " out " << o;
          }
        }
        // Bit for bit: every shape against rows = 1, every kernel against the first.
        std::vector<float> one(50);
        for (int64_t r = 0; r < rows; ++r) {
          std::copy(y_init.begin() + r * 50, y_init.begin() + (r + 1) * 50, one.begin());
          isa.fn(x.data() + r * kStride, kStride, m, bias.data(), one.data(), 50, 1, accumulate);
          EXPECT_EQ(0, std::memcmp(one.data(), y.data() + r * 50, 50 * 4))
              << isa.name << " rows " << rows << " row " << r;
        }
        if (rows == 70) first_isa.push_back(y);
      }
    }
    for (size_t i = 1; i < first_isa.size(); ++i)
      EXPECT_EQ(first_isa[0], first_isa[i]) << "kernel " << Isas()[i].name;
  }
}

TEST(Fp8Linear, StacksWithDenseSegments) {
  // q | k | v style: an FP8 segment, an F32 segment, another FP8 segment.
  const Fp8Fixture a = RandomFixture(20, 130, 1), c = RandomFixture(17, 130, 2);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> dense(9 * 130);
  for (float& v : dense) v = u(rng);
  QuantSource srcs[3] = {};
  auto source = [](const void* data, int64_t rows, int64_t stride, const float* fp8_scales) {
    QuantSource q{kvserve::quant::BlockType::kF32};
    q.data = static_cast<const std::byte*>(data);
    q.rows = rows;
    q.row_stride = stride;
    q.fp8_scales = fp8_scales;
    return q;
  };
  srcs[0] = source(a.codes.data(), 20, 130, a.scales.data());
  srcs[1] = source(dense.data(), 9, 130 * 4, nullptr);
  srcs[2] = source(c.codes.data(), 17, 130, c.scales.data());
  auto m = QuantMatrix::Pack(srcs, 130);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->out_features(), 46);
  std::vector<float> x(3 * 130);
  for (float& v : x) v = u(rng);
  for (const Isa& isa : Isas()) {
    std::vector<float> y(3 * 46);
    isa.fn(x.data(), 130, *m, nullptr, y.data(), 46, 3, false);
    for (int r = 0; r < 3; ++r) {
      for (int o = 0; o < 46; ++o) {
        double ref = 0, mag = 0;
        for (int k = 0; k < 130; ++k) {
          const double w = o < 20 ? a.W(o, k) : o < 29 ? dense[(o - 20) * 130 + k] : c.W(o - 29, k);
          ref += w * x[r * 130 + k];
          mag += std::fabs(w * x[r * 130 + k]);
        }
        EXPECT_NEAR(y[r * 46 + o], ref, 200 * 0x1p-24 * mag + 1e-30) << isa.name << " " << o;
      }
    }
  }
}

TEST(Fp8Linear, RefusesBadScales) {
  Fp8Fixture f = RandomFixture(4, 200, 5);
  f.scales[3] = std::nanf("");
  QuantSource src{};
  src.data = reinterpret_cast<const std::byte*>(f.codes.data());
  src.rows = 4;
  src.row_stride = 200;
  src.fp8_scales = f.scales.data();
  auto m = QuantMatrix::Pack({&src, 1}, 200);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("row 1, column block 1"), std::string::npos)
      << m.status();
  f.scales[3] = 0x1p125f;
  EXPECT_FALSE(QuantMatrix::Pack({&src, 1}, 200).ok());
}

TEST(Fp8Linear, KernelNameIsStated) {
  EXPECT_NE(std::string(Fp8KernelName(Fp8ProcessIsa())).find("fp8"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::kernels::cpu::quant
