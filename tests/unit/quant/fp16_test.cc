// quant/fp16.h: widening against the field definition, round-to-nearest-even narrowing, and
// the directed roundings the quantizers rely on to cover a block's range.
#include "quant/fp16.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/unit/quant/reference_decoders.h"

namespace kvserve::quant {
namespace {

bool FiniteFp16(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

TEST(Fp16Test, WideningIsExactAndNarrowingRoundsTrip) {
  for (int h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if (!FiniteFp16(bits)) continue;
    const float f = Fp16ToFloat(bits);
    ASSERT_EQ(static_cast<double>(f), testing::RefFp16(bits)) << h;
    ASSERT_EQ(FloatToFp16(f), bits) << h;  // -0 included
  }
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bffu);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00u);
  EXPECT_EQ(FloatToFp16(-1e9f), 0xfc00u);
  EXPECT_EQ(FloatToFp16(0x1p-25f), 0x0000u);    // tie to even (0)
  EXPECT_EQ(FloatToFp16(0x1.8p-24f), 0x0002u);  // tie to even (2)
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(NAN))));
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0x7c00u)));
}

TEST(Fp16Test, DirectedRoundingIsTight) {
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 50) - 30);
    const float v = std::uniform_real_distribution<float>(-mag, mag)(rng);
    const uint16_t up = Fp16RoundUp(v), down = Fp16RoundDown(v);
    ASSERT_TRUE(FiniteFp16(up) && FiniteFp16(down)) << v;
    if (std::fabs(v) <= 65504.0f) {
      ASSERT_GE(Fp16ToFloat(up), v) << v;
      ASSERT_LE(Fp16ToFloat(down), v) << v;
      // Tight: the next code toward v is on the other side of it.
      if (Fp16ToFloat(up) != v) {
        ASSERT_LT(Fp16ToFloat(Fp16NextDown(up)), v) << v;
      }
      if (Fp16ToFloat(down) != v) {
        ASSERT_GT(Fp16ToFloat(Fp16NextUp(down)), v) << v;
      }
    } else {
      ASSERT_EQ(Fp16ToFloat(v > 0 ? up : down), v > 0 ? 65504.0f : -65504.0f) << v;
    }
  }
  EXPECT_EQ(Fp16NextUp(0x8000u), 0x0001u);
  EXPECT_EQ(Fp16NextDown(0x0000u), 0x8001u);
  EXPECT_EQ(Fp16RoundUp(0.0f), 0x0000u);
}

}  // namespace
}  // namespace kvserve::quant
