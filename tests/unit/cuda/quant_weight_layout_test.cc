// The host packer of the group-quantized device layout (kernels/cuda/quant_weight_layout.h)
// against the byte layout as its header draws it, read back here by 32-bit little-endian words
// (not by the packer's own byte/nibble rule), and its refusals. No GPU needed (label unit).
#include "kernels/cuda/quant_weight_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace kvserve::kernels::cuda {
namespace {

struct Plain {
  std::vector<uint8_t> codes, zeros;
  std::vector<uint16_t> scales;
};

Plain RandomPlain(const GroupQuantShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, (1 << s.bits) - 1);
  std::uniform_int_distribution<int> half(0, 0x7bff);
  Plain p;
  const size_t ng = static_cast<size_t>(s.out) * static_cast<size_t>(s.in / s.group);
  for (size_t k = 0; k < static_cast<size_t>(s.out) * static_cast<size_t>(s.in); ++k) {
    p.codes.push_back(static_cast<uint8_t>(code(rng)));
  }
  for (size_t k = 0; k < ng; ++k) p.scales.push_back(static_cast<uint16_t>(half(rng)));
  if (s.has_zeros) {
    for (size_t k = 0; k < ng; ++k) p.zeros.push_back(static_cast<uint8_t>(code(rng)));
  }
  return p;
}

// Element (o, i) per the header: bits * i / 8 bytes into row o; for 4 bits, 32-bit word k of
// the row holds elements 8k..8k+7, element 8k+j at bits 4j.
int CodeFromLayout(const std::vector<uint8_t>& bytes, const GroupQuantShape& s, int o, int i) {
  const size_t row =
      static_cast<size_t>(o) * static_cast<size_t>(s.in) * static_cast<size_t>(s.bits) / 8;
  if (s.bits == 8) return bytes[row + static_cast<size_t>(i)];
  const size_t k = static_cast<size_t>(i) / 8;
  const uint8_t* b = bytes.data() + row + 4 * k;
  const uint32_t word =
      uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
  return static_cast<int>((word >> (4 * (i % 8))) & 0xFu);
}

TEST(QuantWeightLayout, RoundTripsEveryBitsGroupAndZeroChoice) {
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (bool zeros : {false, true}) {
        const GroupQuantShape s{bits, 5, 3 * 128, group, zeros};
        const Plain p = RandomPlain(s, static_cast<uint32_t>(bits * 1000 + group * 10 + zeros));
        auto packed = PackGroupQuantWeight(s, p.codes, p.scales, p.zeros);
        ASSERT_TRUE(packed.ok()) << packed.status();
        SCOPED_TRACE(testing::Message()
                     << "bits " << bits << " group " << group << " zeros " << zeros);
        ASSERT_EQ(packed->codes.size(), static_cast<size_t>(s.out) * s.in * bits / 8);
        EXPECT_EQ(s.code_row_bytes() % 16, 0);
        for (int o = 0; o < s.out; ++o) {
          for (int i = 0; i < s.in; ++i) {
            const int want = p.codes[static_cast<size_t>(o) * s.in + i];
            ASSERT_EQ(CodeFromLayout(packed->codes, s, o, i), want) << "element " << o << "," << i;
            ASSERT_EQ(PackedCode(*packed, o, i), want);
          }
        }
        EXPECT_EQ(packed->scales, p.scales);
        EXPECT_EQ(packed->zeros, p.zeros);
        EXPECT_EQ(packed->shape.symmetric_zero(), 1 << (bits - 1));
      }
    }
  }
}

TEST(QuantWeightLayout, FourBitNibbleOrderIsSequential) {
  // Codes 0..15 then 15..0: byte 0 holds elements 0 (low) and 1 (high), and so on.
  const GroupQuantShape s{4, 1, 32, 32, false};
  std::vector<uint8_t> codes(32);
  for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(i < 16 ? i : 31 - i);
  const std::vector<uint16_t> scales = {0x3c00};
  auto packed = PackGroupQuantWeight(s, codes, scales, {});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->codes[0], 0x10);
  EXPECT_EQ(packed->codes[1], 0x32);
  EXPECT_EQ(packed->codes[7], 0xfe);
  EXPECT_EQ(packed->codes[8], 0xef);
  EXPECT_EQ(packed->codes[15], 0x01);
}

TEST(QuantWeightLayout, RefusesBadShapesAndCodes) {
  const std::vector<uint16_t> one_scale = {0x3c00};
  EXPECT_FALSE(ValidateGroupQuantShape({3, 1, 32, 32, false}).ok());
  EXPECT_FALSE(ValidateGroupQuantShape({4, 1, 96, 48, false}).ok());
  EXPECT_FALSE(ValidateGroupQuantShape({4, 1, 100, 32, false}).ok());
  EXPECT_FALSE(ValidateGroupQuantShape({4, 0, 32, 32, false}).ok());
  EXPECT_TRUE(ValidateGroupQuantShape({8, 1, 128, 128, true}).ok());

  std::vector<uint8_t> codes(32, 3);
  codes[17] = 16;  // does not fit in 4 bits
  auto bad = PackGroupQuantWeight({4, 1, 32, 32, false}, codes, one_scale, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("element 17"), std::string::npos) << bad.status();
  codes[17] = 3;
  EXPECT_TRUE(PackGroupQuantWeight({4, 1, 32, 32, false}, codes, one_scale, {}).ok());
  // Zeros where the shape says none, none where it says some, and one that does not fit.
  const std::vector<uint8_t> zero = {8}, big_zero = {16};
  EXPECT_FALSE(PackGroupQuantWeight({4, 1, 32, 32, false}, codes, one_scale, zero).ok());
  EXPECT_FALSE(PackGroupQuantWeight({4, 1, 32, 32, true}, codes, one_scale, {}).ok());
  auto bz = PackGroupQuantWeight({4, 1, 32, 32, true}, codes, one_scale, big_zero);
  ASSERT_FALSE(bz.ok());
  EXPECT_NE(bz.status().message().find("zero point"), std::string::npos) << bz.status();
  // Sizes that disagree with the shape.
  EXPECT_FALSE(PackGroupQuantWeight({4, 1, 64, 32, false}, codes, one_scale, {}).ok());
  EXPECT_FALSE(PackGroupQuantWeight({4, 1, 32, 32, false}, codes, {}, {}).ok());
}

}  // namespace
}  // namespace kvserve::kernels::cuda
