// Checkpoint tensors into the device layout (kernels/cuda/quant_weight_import.h): random plain
// codes, scales and zero points are written here in each checkpoint format, from the format's
// description (the reverse direction of the code under test), converted, and must come back
// element for element. No GPU needed (label unit).
#include "kernels/cuda/quant_weight_import.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvserve::kernels::cuda {
namespace {

struct Plain {
  int out, in, group, bits;
  std::vector<uint8_t> codes;    // [out][in]
  std::vector<uint16_t> scales;  // [out][in/group]
  std::vector<uint8_t> zeros;    // [out][in/group]
  int groups() const { return in / group; }
  int code(int o, int i) const { return codes[static_cast<size_t>(o) * in + i]; }
  uint16_t scale(int o, int g) const { return scales[static_cast<size_t>(o) * groups() + g]; }
  int zero(int o, int g) const { return zeros[static_cast<size_t>(o) * groups() + g]; }
};

Plain RandomPlain(int out, int in, int group, int bits, bool symmetric, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1), half(0x1000, 0x3bff);
  Plain p{out, in, group, bits, {}, {}, {}};
  for (int k = 0; k < out * in; ++k) p.codes.push_back(static_cast<uint8_t>(code(rng)));
  for (int k = 0; k < out * (in / group); ++k) {
    p.scales.push_back(static_cast<uint16_t>(half(rng)));
    p.zeros.push_back(static_cast<uint8_t>(symmetric ? 1 << (bits - 1) : code(rng)));
  }
  return p;
}

void ExpectSame(const Plain& p, const PackedGroupQuantWeight& w, bool zeros_kept) {
  ASSERT_EQ(w.shape.out, p.out);
  ASSERT_EQ(w.shape.in, p.in);
  ASSERT_EQ(w.shape.group, p.group);
  ASSERT_EQ(w.shape.bits, p.bits);
  ASSERT_EQ(w.shape.has_zeros, zeros_kept);
  for (int o = 0; o < p.out; ++o) {
    for (int i = 0; i < p.in; ++i) ASSERT_EQ(PackedCode(w, o, i), p.code(o, i)) << o << "," << i;
    for (int g = 0; g < p.groups(); ++g) {
      const size_t k = static_cast<size_t>(o) * p.groups() + g;
      ASSERT_EQ(w.scales[k], p.scale(o, g)) << o << "," << g;
      ASSERT_EQ(zeros_kept ? w.zeros[k] : w.shape.symmetric_zero(), p.zero(o, g)) << o << "," << g;
    }
  }
}

TEST(QuantWeightImport, GgufQ4_0) {
  const Plain p = RandomPlain(6, 96, 32, 4, /*symmetric=*/true, 1);
  std::vector<uint8_t> data;  // per block: fp16 d (little-endian), qs[16]: j low, j + 16 high
  for (int o = 0; o < p.out; ++o) {
    for (int b = 0; b < p.in / 32; ++b) {
      data.push_back(static_cast<uint8_t>(p.scale(o, b) & 0xff));
      data.push_back(static_cast<uint8_t>(p.scale(o, b) >> 8));
      for (int j = 0; j < 16; ++j) {
        data.push_back(
            static_cast<uint8_t>(p.code(o, 32 * b + j) | (p.code(o, 32 * b + j + 16) << 4)));
      }
    }
  }
  auto w = PackGgufQ4_0(data, p.out, p.in);
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectSame(p, *w, false);
  data.pop_back();
  EXPECT_FALSE(PackGgufQ4_0(data, p.out, p.in).ok());
}

TEST(QuantWeightImport, GgufQ8_0) {
  const Plain p = RandomPlain(5, 64, 32, 8, /*symmetric=*/true, 2);
  std::vector<uint8_t> data;  // per block: fp16 d, 32 int8 q with value d·q, so q = code − 128
  for (int o = 0; o < p.out; ++o) {
    for (int b = 0; b < p.in / 32; ++b) {
      data.push_back(static_cast<uint8_t>(p.scale(o, b) & 0xff));
      data.push_back(static_cast<uint8_t>(p.scale(o, b) >> 8));
      for (int j = 0; j < 32; ++j)
        data.push_back(static_cast<uint8_t>(static_cast<int8_t>(p.code(o, 32 * b + j) - 128)));
    }
  }
  auto w = PackGgufQ8_0(data, p.out, p.in);
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectSame(p, *w, false);
}

TEST(QuantWeightImport, AwqGemm) {
  for (int group : {64, 128}) {
    const Plain p = RandomPlain(16, 256, group, 4, /*symmetric=*/false, 3);
    const int words = p.out / 8;
    constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble k -> column 8c + kOrder[k]
    std::vector<int32_t> qweight(static_cast<size_t>(p.in) * words),
        qzeros(static_cast<size_t>(p.groups()) * words);
    std::vector<uint16_t> scales(static_cast<size_t>(p.groups()) * p.out);
    for (int c = 0; c < words; ++c) {
      for (int k = 0; k < 8; ++k) {
        const int o = 8 * c + kOrder[k];
        for (int i = 0; i < p.in; ++i) {
          qweight[static_cast<size_t>(i) * words + c] |=
              static_cast<int32_t>(static_cast<uint32_t>(p.code(o, i)) << (4 * k));
        }
        for (int g = 0; g < p.groups(); ++g) {
          qzeros[static_cast<size_t>(g) * words + c] |=
              static_cast<int32_t>(static_cast<uint32_t>(p.zero(o, g)) << (4 * k));
        }
      }
    }
    for (int g = 0; g < p.groups(); ++g) {
      for (int o = 0; o < p.out; ++o) scales[static_cast<size_t>(g) * p.out + o] = p.scale(o, g);
    }
    auto w = PackAwqGemm(qweight, qzeros, scales, p.in, p.out, group);
    ASSERT_TRUE(w.ok()) << w.status();
    ExpectSame(p, *w, true);
    qzeros.pop_back();
    auto bad = PackAwqGemm(qweight, qzeros, scales, p.in, p.out, group);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("qzeros"), std::string::npos) << bad.status();
  }
}

// GPTQ tensors from plain codes: qweight packs `in`, qzeros packs `out`, both sequentially;
// v1 stores z − 1 (modulo 2^bits).
struct GptqTensors {
  std::vector<int32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
};

GptqTensors WriteGptq(const Plain& p, bool v1) {
  const int per = 32 / p.bits;
  GptqTensors t;
  t.qweight.assign(static_cast<size_t>(p.in / per) * p.out, 0);
  t.qzeros.assign(static_cast<size_t>(p.groups()) * (p.out / per), 0);
  for (int i = 0; i < p.in; ++i) {
    for (int o = 0; o < p.out; ++o) {
      t.qweight[static_cast<size_t>(i / per) * p.out + o] |=
          static_cast<int32_t>(static_cast<uint32_t>(p.code(o, i)) << (p.bits * (i % per)));
    }
  }
  for (int g = 0; g < p.groups(); ++g) {
    for (int o = 0; o < p.out; ++o) {
      const uint32_t stored =
          static_cast<uint32_t>(p.zero(o, g) - (v1 ? 1 : 0)) & ((1u << p.bits) - 1u);
      t.qzeros[static_cast<size_t>(g) * (p.out / per) + o / per] |=
          static_cast<int32_t>(stored << (p.bits * (o % per)));
    }
    for (int o = 0; o < p.out; ++o) t.scales.push_back(p.scale(o, g));
  }
  return t;
}

TEST(QuantWeightImport, GptqEveryBitsAndZeroFormat) {
  uint32_t seed = 10;
  for (int bits : {4, 8}) {
    for (bool v1 : {false, true}) {
      for (bool symmetric : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "bits " << bits << " v1 " << v1 << " symmetric " << symmetric);
        Plain p = RandomPlain(16, 256, 32, bits, symmetric, seed++);
        if (!symmetric) p.zeros[0] = 0;  // v1 stores −1: must wrap back to 0
        const GptqTensors t = WriteGptq(p, v1);
        auto w = PackGptq(t.qweight, t.qzeros, t.scales, {}, bits, p.in, p.out, p.group, v1);
        ASSERT_TRUE(w.ok()) << w.status();
        ExpectSame(p, *w, /*zeros_kept=*/!symmetric);
      }
    }
  }
}

TEST(QuantWeightImport, GptqGIdx) {
  const Plain p = RandomPlain(8, 128, 32, 4, false, 20);
  const GptqTensors t = WriteGptq(p, false);
  std::vector<int32_t> g_idx(128);
  for (int i = 0; i < 128; ++i) g_idx[i] = i / 32;
  auto w = PackGptq(t.qweight, t.qzeros, t.scales, g_idx, 4, p.in, p.out, p.group, false);
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectSame(p, *w, true);
  std::swap(g_idx[3], g_idx[100]);  // act-order
  auto refused = PackGptq(t.qweight, t.qzeros, t.scales, g_idx, 4, p.in, p.out, p.group, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("g_idx[3]"), std::string::npos) << refused.status();
}

TEST(QuantWeightImport, CompressedTensorsPackQuantized) {
  uint32_t seed = 30;
  for (int bits : {4, 8}) {
    for (bool channel : {false, true}) {
      for (bool symmetric : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "bits " << bits << " channel " << channel << " symmetric " << symmetric);
        // out 20: the zero points' last packed row is partial.
        Plain p = RandomPlain(20, 256, channel ? 128 : 64, bits, symmetric, seed++);
        if (channel) {  // one scale and zero per row, repeated over the 128-groups
          for (int o = 0; o < p.out; ++o) {
            for (int g = 1; g < p.groups(); ++g) {
              p.scales[static_cast<size_t>(o) * p.groups() + g] = p.scale(o, 0);
              p.zeros[static_cast<size_t>(o) * p.groups() + g] = static_cast<uint8_t>(p.zero(o, 0));
            }
          }
        }
        const int per = 32 / bits, src_groups = channel ? 1 : p.groups();
        std::vector<int32_t> packed(static_cast<size_t>(p.out) * (p.in / per));
        for (int o = 0; o < p.out; ++o) {
          for (int i = 0; i < p.in; ++i) {
            packed[static_cast<size_t>(o) * (p.in / per) + i / per] |=
                static_cast<int32_t>(static_cast<uint32_t>(p.code(o, i)) << (bits * (i % per)));
          }
        }
        std::vector<uint16_t> scales;
        for (int o = 0; o < p.out; ++o) {
          for (int g = 0; g < src_groups; ++g) scales.push_back(p.scale(o, g));
        }
        std::vector<int32_t> zps;
        if (!symmetric) {
          zps.assign(static_cast<size_t>((p.out + per - 1) / per) * src_groups, 0);
          for (int o = 0; o < p.out; ++o) {
            for (int g = 0; g < src_groups; ++g) {
              zps[static_cast<size_t>(o / per) * src_groups + g] |=
                  static_cast<int32_t>(static_cast<uint32_t>(p.zero(o, g)) << (bits * (o % per)));
            }
          }
        }
        auto w =
            PackCompressedTensors(packed, scales, zps, bits, p.out, p.in, channel ? 0 : p.group);
        ASSERT_TRUE(w.ok()) << w.status();
        ExpectSame(p, *w, !symmetric);
      }
    }
  }
  auto bad =
      PackCompressedTensors(std::vector<int32_t>(10), std::vector<uint16_t>(2), {}, 4, 2, 128, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("weight_packed"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace kvserve::kernels::cuda
