#include "kernels/cpu/kv_quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if !defined(__FLT16_MAX__) && defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kvserve::kernels::cpu {
namespace {

using config::KvDtype;

// The compiler's (or the CPU's) float -> binary16 conversion, round to nearest even: the
// reference FloatToHalf is checked against. GCC 12 and clang >= 15 have _Float16 on x86-64;
// clang 14 (the sanitizer presets' compiler) does not, so it uses the F16C instruction, which
// every x86-64-v3 CPU has.
#if defined(__FLT16_MAX__)
bool HaveReferenceHalf() { return true; }
uint16_t ReferenceHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
#elif defined(__x86_64__)
bool HaveReferenceHalf() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
__attribute__((target("f16c"))) uint16_t ReferenceHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
#else
bool HaveReferenceHalf() { return false; }
uint16_t ReferenceHalf(float) { return 0; }
#endif

TEST(KvQuant, HalfRoundTripsEveryCode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "code " << h << " value " << f;
  }
}

TEST(KvQuant, HalfKnownValuesAndRounding) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // tie rounds to even: inf
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);   // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);   // tie between 0 and 2^-24: even (0)
  EXPECT_EQ(FloatToHalf(0x1.8p-24f), 0x0002); // tie between 1 and 2 units: even (2)
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even keeps 1.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
}

TEST(KvQuant, HalfMatchesCompilerConversionOnRandomFloats) {
  ASSERT_TRUE(HaveReferenceHalf()) << "no _Float16 and no F16C: nothing to compare FloatToHalf with";
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), ReferenceHalf(f)) << "value " << f;
  }
}

TEST(KvQuant, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBf16(f), b);
    }
  }
}

TEST(KvQuant, Fp8E4M3EveryCodeAndSaturation) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      ++nans;
      continue;
    }
    EXPECT_EQ(FloatToFp8E4M3(f), c) << "code " << c << " value " << f;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(FloatToFp8E4M3(1000.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1000.0f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(460.0f), 0x7e);  // rounds past 448: saturates, never NaN
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);  // tie between 1 and 1.125: even (1)
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even (1.25)
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00); // tie between 0 and 2^-9: even (0)
  EXPECT_EQ(FloatToFp8E4M3(0x1.8p-9f), 0x02);  // tie between 1 and 2 steps: even (2)
}

TEST(KvQuant, RowDecodersAgreeWithScalarDecodersOnEveryCode) {
  // The row loops use arithmetic decoders (vectorizable); the scalar API uses a table and
  // plain conversions. They must agree bit for bit (NaN: both NaN).
  std::vector<std::byte> fp8(256);
  for (int c = 0; c < 256; ++c) fp8[c] = std::byte(c);
  std::vector<float> out(256);
  const float one = 1.0f;
  DequantizeRow(fp8.data(), &one, 256, KvDtype::kFp8E4M3, out.data());
  for (int c = 0; c < 256; ++c) {
    const float want = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[c])) << c;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(out[c]), std::bit_cast<uint32_t>(want)) << c;
    }
  }
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(0x10000);
  for (KvDtype d : {KvDtype::kFp16, KvDtype::kBf16}) {
    DequantizeRow(reinterpret_cast<const std::byte*>(halves.data()), nullptr, 0x10000, d,
                  wide.data());
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float want = d == KvDtype::kFp16 ? HalfToFloat(static_cast<uint16_t>(h))
                                             : Bf16ToFloat(static_cast<uint16_t>(h));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(wide[h])) << h;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]), std::bit_cast<uint32_t>(want)) << h;
      }
    }
  }
}

TEST(KvQuant, Fp8MatchesNearestRepresentable) {
  // Brute force: the encoder picks a nearest code for every float in range.
  std::vector<float> codes;
  for (int c = 0; c < 128; ++c) {
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (!std::isnan(f)) codes.push_back(f);
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-460.0f, 460.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i % 2 ? dist(rng) : dist(rng) / 1024.0f;
    const float got = Fp8E4M3ToFloat(FloatToFp8E4M3(x));
    float best = 1e30f;
    for (float c : codes) best = std::fmin(best, std::fabs(std::fabs(x) - c));
    ASSERT_FLOAT_EQ(std::fabs(std::fabs(x) - std::fabs(got)), best) << x;
  }
}

TEST(KvQuant, RowsRoundTripWithinDtypePrecision) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  constexpr int kDim = 96;
  std::vector<float> src(kDim), out(kDim);
  for (float& x : src) x = normal(rng);
  src[5] = 9.0f;  // an outlier channel, as real K vectors have
  struct Case {
    KvDtype dtype;
    double max_rel_to_absmax;
  };
  // Bounds relative to max|x|: half an ulp at the top of the row's range.
  for (const Case& c : {Case{KvDtype::kFp32, 0.0}, Case{KvDtype::kFp16, 0x1p-11},
                        Case{KvDtype::kBf16, 0x1p-8}, Case{KvDtype::kFp8E4M3, 0x1p-4},
                        Case{KvDtype::kInt8, 0.5 / 127}}) {
    std::vector<std::byte> q(kDim * cache::KvDtypeBytes(c.dtype));
    float scale = -1.0f;
    QuantizeRow(src.data(), kDim, c.dtype, q.data(), &scale);
    DequantizeRow(q.data(), &scale, kDim, c.dtype, out.data());
    double max_err = 0;
    for (int i = 0; i < kDim; ++i) max_err = std::fmax(max_err, std::fabs(src[i] - out[i]));
    EXPECT_LE(max_err, c.max_rel_to_absmax * 9.0 + 1e-7) << static_cast<int>(c.dtype);
    if (cache::KvDtypeHasScales(c.dtype)) {
      EXPECT_GT(scale, 0.0f);
      // The largest element maps to the top code exactly.
      EXPECT_NEAR(out[5], 9.0f, 1e-5f);
    }
  }
}

TEST(KvQuant, ZeroRowHasZeroScaleAndDecodesToZero) {
  std::vector<float> src(16, 0.0f), out(16, 1.0f);
  for (KvDtype d : {KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    std::vector<std::byte> q(16);
    float scale = -1.0f;
    QuantizeRow(src.data(), 16, d, q.data(), &scale);
    EXPECT_EQ(scale, 0.0f);
    DequantizeRow(q.data(), &scale, 16, d, out.data());
    for (float x : out) EXPECT_EQ(x, 0.0f);
  }
}

TEST(KvQuant, PagedRowAddressingFollowsTheLayout) {
  cache::KvLayout l;
  l.num_layers = 1;
  l.num_kv_heads = 2;
  l.head_dim = 4;
  l.block_size = 8;
  l.dtype = KvDtype::kInt8;
  const int blocks = 3;
  std::vector<std::byte> data(blocks * l.block_elems() * l.elem_bytes());
  std::vector<float> scales(blocks * l.block_scales());
  const float v[4] = {1.0f, -2.0f, 0.5f, 4.0f};
  WriteKvRow(l, data.data(), scales.data(), /*block=*/2, /*kv=*/1, /*head=*/1, /*offset=*/5, v);
  // Exactly one row and one scale were touched, where kv_layout.h says.
  const size_t elem = l.elem_offset(2, 1, 1, 5);
  int nonzero = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != std::byte{0}) {
      ++nonzero;
      EXPECT_GE(i, elem);
      EXPECT_LT(i, elem + 4);
    }
  }
  EXPECT_EQ(nonzero, 4);
  EXPECT_FLOAT_EQ(scales[l.scale_offset(2, 1, 1, 5)], 4.0f / 127);
  float out[4];
  ReadKvRow(l, data.data(), scales.data(), 2, 1, 1, 5, out);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], v[i], 4.0f / 254);
  // DequantizeRows over the whole (block 2, V, head 1) run sees the row at offset 5.
  std::vector<float> run(l.head_run_elems());
  DequantizeRows(data.data() + l.elem_offset(2, 1, 1, 0), scales.data() + l.scale_offset(2, 1, 1, 0),
                 l.block_size, l.head_dim, l.dtype, run.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(run[5 * 4 + i], out[i]);
  EXPECT_EQ(run[0], 0.0f);
}

}  // namespace
}  // namespace kvserve::kernels::cpu
