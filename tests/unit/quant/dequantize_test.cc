// DequantizeRows against the float64 reference decoders (reference_decoders.h), bit for bit,
// on random blocks: bytes for every code and packed-scale field (a patterned prefix makes
// every nibble, 6-bit scale/min pattern and int8 scale occur in every position), and
// fp16 scale fields drawn from random finite values plus the extremes (+-0, the smallest and
// largest subnormals, the smallest normal, +-65504, +-1). NaN/inf scales are excluded.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "quant/block_type.h"
#include "tests/unit/quant/reference_decoders.h"

namespace kvserve::quant {
namespace {

using testing::RefBf16;
using testing::RefFp16;

struct DecodeCase {
  BlockType type;
  void (*reference)(const uint8_t* blk, float* out);
  std::vector<int> fp16_offsets;  // byte offsets of the block's fp16 scale fields
};

std::string CaseName(const ::testing::TestParamInfo<DecodeCase>& info) {
  return std::string(Traits(info.param.type).name);
}

uint16_t RandomFiniteFp16(std::mt19937& rng) {
  static constexpr uint16_t kExtremes[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff,
                                           0x0400, 0x8400, 0x7bff, 0xfbff, 0x3c00, 0xbc00};
  if (rng() % 4 == 0) return kExtremes[rng() % std::size(kExtremes)];
  uint16_t h = static_cast<uint16_t>(rng());
  if (((h >> 10) & 31) == 31) h = static_cast<uint16_t>(h & ~0x4000u);  // inf/NaN -> finite
  return h;
}

class DequantizeTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DequantizeTest, MatchesFloat64ReferenceBitForBit) {
  const DecodeCase& c = GetParam();
  const BlockTraits& t = Traits(c.type);
  std::mt19937 rng(1234 + static_cast<uint32_t>(c.type));
  const int64_t blocks = t.block_elements == 256 ? 2048 : 8192;
  std::vector<uint8_t> data(static_cast<size_t>(blocks * t.block_bytes));
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // The first 256 blocks are not left to chance: byte k of block b is (b + 37k) mod 256, so
  // every byte position takes every value (every nibble, code and int8 scale). The 6-bit
  // scales/mins split across bytes come from the random blocks; the test checks below that
  // each of them took all 64 values in every position.
  for (int64_t b = 0; b < 256; ++b) {
    for (int k = 0; k < t.block_bytes; ++k) {
      data[b * t.block_bytes + k] = static_cast<uint8_t>((b + 37 * k) & 255);
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int off : c.fp16_offsets) {
      const uint16_t h = RandomFiniteFp16(rng);
      data[b * t.block_bytes + off] = static_cast<uint8_t>(h & 0xff);
      data[b * t.block_bytes + off + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  // Several rows of several blocks each, so row stepping is covered too.
  const int64_t rows = 8;
  const int64_t n = blocks / rows * t.block_elements;
  std::vector<float> got(static_cast<size_t>(rows * n));
  DequantizeRows(c.type, reinterpret_cast<const std::byte*>(data.data()), rows, n, got.data());

  std::vector<float> want(static_cast<size_t>(t.block_elements));
  int64_t mismatches = 0;
  std::vector<std::array<bool, 64>> seen(16, std::array<bool, 64>{});
  int six_bit_fields = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    int codes[16];
    six_bit_fields = testing::RefSixBitCodes(static_cast<uint32_t>(c.type),
                                             data.data() + b * t.block_bytes, codes);
    for (int f = 0; f < six_bit_fields; ++f) seen[f][codes[f]] = true;
    c.reference(data.data() + b * t.block_bytes, want.data());
    for (int i = 0; i < t.block_elements; ++i) {
      const float g = got[b * t.block_elements + i];
      if (std::bit_cast<uint32_t>(g) != std::bit_cast<uint32_t>(want[i]) && mismatches++ < 5) {
        ADD_FAILURE() << t.name << " block " << b << " element " << i << ": got " << g << " want "
                      << want[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  for (int f = 0; f < six_bit_fields; ++f) {
    for (int v = 0; v < 64; ++v) EXPECT_TRUE(seen[f][v]) << "6-bit field " << f << " value " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllQuantized, DequantizeTest,
    ::testing::Values(DecodeCase{BlockType::kQ4_0, &testing::RefDecodeQ4_0, {0}},
                      DecodeCase{BlockType::kQ4_1, &testing::RefDecodeQ4_1, {0, 2}},
                      DecodeCase{BlockType::kQ5_0, &testing::RefDecodeQ5_0, {0}},
                      DecodeCase{BlockType::kQ5_1, &testing::RefDecodeQ5_1, {0, 2}},
                      DecodeCase{BlockType::kQ8_0, &testing::RefDecodeQ8_0, {0}},
                      DecodeCase{BlockType::kQ2_K, &testing::RefDecodeQ2_K, {80, 82}},
                      DecodeCase{BlockType::kQ3_K, &testing::RefDecodeQ3_K, {108}},
                      DecodeCase{BlockType::kQ4_K, &testing::RefDecodeQ4_K, {0, 2}},
                      DecodeCase{BlockType::kQ5_K, &testing::RefDecodeQ5_K, {0, 2}},
                      DecodeCase{BlockType::kQ6_K, &testing::RefDecodeQ6_K, {208}},
                      DecodeCase{BlockType::kIQ4_NL, &testing::RefDecodeIQ4_NL, {0}},
                      DecodeCase{BlockType::kIQ4_XS, &testing::RefDecodeIQ4_XS, {0}},
                      // MXFP4's E8M0 byte stays random: every exponent 0..255 occurs.
                      DecodeCase{BlockType::kMXFP4, &testing::RefDecodeMXFP4, {}}),
    CaseName);

// Every quantized type in the table has a case above (a new type must bring its reference).
TEST(DequantizeTest, EveryQuantizedTypeHasAReference) {
  const std::vector<BlockType> covered = {
      BlockType::kQ4_0,  BlockType::kQ4_1,   BlockType::kQ5_0,   BlockType::kQ5_1,
      BlockType::kQ8_0,  BlockType::kQ2_K,   BlockType::kQ3_K,   BlockType::kQ4_K,
      BlockType::kQ5_K,  BlockType::kQ6_K,   BlockType::kIQ4_NL, BlockType::kIQ4_XS,
      BlockType::kMXFP4, BlockType::kU4_F32, BlockType::kU8_F32};
  for (const BlockTraits& t : AllBlockTypes()) {
    if (!t.quantized) continue;
    EXPECT_NE(std::find(covered.begin(), covered.end(), t.type), covered.end()) << t.name;
  }
}

// Ours (U4_F32, U8_F32): finite f32 a and b = -zero * a as a Hugging Face group makes them,
// every code value, bit for bit against the reference.
TEST(DequantizeTest, GroupedIntMatchesReference) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (BlockType type : {BlockType::kU4_F32, BlockType::kU8_F32}) {
    const BlockTraits& t = Traits(type);
    const int64_t blocks = 512;
    std::vector<uint8_t> data(static_cast<size_t>(blocks * t.block_bytes));
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = data.data() + b * t.block_bytes;
      for (int k = 8; k < t.block_bytes; ++k) blk[k] = static_cast<uint8_t>((b + 37 * k) & 255);
      const float a = std::ldexp(uni(rng), -static_cast<int>(rng() % 20));
      const float bias = -static_cast<float>(rng() % 256) * a;
      std::memcpy(blk, &a, 4);
      std::memcpy(blk + 4, &bias, 4);
    }
    std::vector<float> got(static_cast<size_t>(blocks * 32)), want(32);
    DequantizeRows(type, reinterpret_cast<const std::byte*>(data.data()), 4, blocks / 4 * 32,
                   got.data());
    for (int64_t b = 0; b < blocks; ++b) {
      (type == BlockType::kU4_F32 ? testing::RefDecodeU4_F32 : testing::RefDecodeU8_F32)(
          data.data() + b * t.block_bytes, want.data());
      for (int i = 0; i < 32; ++i) ASSERT_EQ(got[b * 32 + i], want[i]) << t.name << " " << b;
    }
  }
}

// F16 and BF16: every finite code widens to its exact value.
TEST(DequantizeTest, HalfAndBf16EveryFiniteCode) {
  std::vector<uint8_t> codes(2 * 65536);
  for (int h = 0; h < 65536; ++h) {
    codes[2 * h] = static_cast<uint8_t>(h & 0xff);
    codes[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> out(65536);
  const auto* bytes = reinterpret_cast<const std::byte*>(codes.data());
  DequantizeRows(BlockType::kF16, bytes, 1, 65536, out.data());
  for (int h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31) {
      EXPECT_FALSE(std::isfinite(out[h])) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(out[h]), RefFp16(static_cast<uint16_t>(h))) << h;
    ASSERT_EQ(std::signbit(out[h]), h >= 0x8000) << h;
  }
  DequantizeRows(BlockType::kBF16, bytes, 1, 65536, out.data());
  for (int h = 0; h < 65536; ++h) {
    if (((h >> 7) & 255) == 255) continue;
    ASSERT_EQ(static_cast<double>(out[h]), RefBf16(static_cast<uint16_t>(h))) << h;
  }
  std::vector<float> f32 = {1.5f, -0.0f, 3e-40f, -7.25e30f};
  std::vector<float> back(f32.size());
  DequantizeRows(BlockType::kF32, reinterpret_cast<const std::byte*>(f32.data()), 2, 2,
                 back.data());
  EXPECT_EQ(std::memcmp(f32.data(), back.data(), f32.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvserve::quant
