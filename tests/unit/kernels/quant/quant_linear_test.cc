// QuantLinear (kernels/cpu/quant) against a float64 product of x and the weights decoded by
// the independent reference decoders of tests/unit/quant (written from the layout
// description), within the bound stated in kernels/cpu/quant/panel_format.h. Fixtures are
// random blocks (random code bytes, scale fields set to sane fp16 values) made at test time.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"  // FloatToHalf
#include "kernels/cpu/quant/quant_linear.h"
#include "quant/block_type.h"
#include "tests/unit/quant/reference_decoders.h"

namespace kvserve::kernels::cpu::quant {
namespace {

using kvserve::quant::BlockType;
namespace ref = kvserve::quant::testing;

struct TypeInfo {
  BlockType type;
  const char* name;
  int elems;
  int bytes;
  void (*decode)(const uint8_t*, float*);  // null for dense types
  std::vector<int> f16_fields;             // offsets of fp16 scale fields to make sane
};

const std::vector<TypeInfo>& Types() {
  static const std::vector<TypeInfo> types = {
      {BlockType::kQ4_0, "Q4_0", 32, 18, ref::RefDecodeQ4_0, {0}},
      {BlockType::kQ4_1, "Q4_1", 32, 20, ref::RefDecodeQ4_1, {0, 2}},
      {BlockType::kQ5_0, "Q5_0", 32, 22, ref::RefDecodeQ5_0, {0}},
      {BlockType::kQ5_1, "Q5_1", 32, 24, ref::RefDecodeQ5_1, {0, 2}},
      {BlockType::kQ8_0, "Q8_0", 32, 34, ref::RefDecodeQ8_0, {0}},
      {BlockType::kQ2_K, "Q2_K", 256, 84, ref::RefDecodeQ2_K, {80, 82}},
      {BlockType::kQ3_K, "Q3_K", 256, 110, ref::RefDecodeQ3_K, {108}},
      {BlockType::kQ4_K, "Q4_K", 256, 144, ref::RefDecodeQ4_K, {0, 2}},
      {BlockType::kQ5_K, "Q5_K", 256, 176, ref::RefDecodeQ5_K, {0, 2}},
      {BlockType::kQ6_K, "Q6_K", 256, 210, ref::RefDecodeQ6_K, {208}},
      {BlockType::kIQ4_NL, "IQ4_NL", 32, 18, ref::RefDecodeIQ4_NL, {0}},
      {BlockType::kIQ4_XS, "IQ4_XS", 256, 136, ref::RefDecodeIQ4_XS, {0}},
      {BlockType::kMXFP4, "MXFP4", 32, 17, ref::RefDecodeMXFP4, {}},
      {BlockType::kU4_F32, "U4_F32", 32, 24, ref::RefDecodeU4_F32, {}},
      {BlockType::kU8_F32, "U8_F32", 32, 40, ref::RefDecodeU8_F32, {}},
      {BlockType::kF32, "F32", 1, 4, nullptr, {}},
      {BlockType::kF16, "F16", 1, 2, nullptr, {}},
      {BlockType::kBF16, "BF16", 1, 2, nullptr, {}},
  };
  return types;
}

const TypeInfo& Info(BlockType t) {
  for (const TypeInfo& i : Types())
    if (i.type == t) return i;
  ADD_FAILURE() << "no info";
  return Types()[0];
}

// A weight matrix: `rows` rows of `in` elements as file bytes, and the decoded weights.
struct Weights {
  BlockType type;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  std::vector<std::byte> data;
  std::vector<float> w;  // [rows][in]
};

Weights MakeWeights(BlockType type, int64_t rows, int64_t in, std::mt19937& rng) {
  const TypeInfo& info = Info(type);
  Weights m;
  m.type = type;
  m.rows = rows;
  m.row_bytes = in / info.elems * info.bytes;
  m.data.resize(rows * m.row_bytes);
  m.w.resize(rows * in);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  if (info.decode == nullptr) {
    for (int64_t i = 0; i < rows * in; ++i) {
      const float v = uni(rng);
      if (type == BlockType::kF32) {
        std::memcpy(&m.data[4 * i], &v, 4);
        m.w[i] = v;
      } else if (type == BlockType::kF16) {
        const uint16_t h = FloatToHalf(v);
        std::memcpy(&m.data[2 * i], &h, 2);
        m.w[i] = static_cast<float>(ref::RefFp16(h));
      } else {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(&m.data[2 * i], &h, 2);
        m.w[i] = static_cast<float>(ref::RefBf16(h));
      }
    }
    return m;
  }
  const int64_t blocks = rows * in / info.elems;
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = reinterpret_cast<uint8_t*>(&m.data[b * info.bytes]);
    for (int i = 0; i < info.bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
    // Scales of a few 1e-3..1e-2 with either sign, so the products stay in a normal range.
    for (int off : info.f16_fields) {
      const uint16_t h = FloatToHalf(uni(rng) * 0.01f);
      std::memcpy(blk + off, &h, 2);
    }
    if (type == BlockType::kMXFP4) blk[0] = static_cast<uint8_t>(118 + byte(rng) % 8);
    if (type == BlockType::kU4_F32 || type == BlockType::kU8_F32) {
      // As a Hugging Face group makes them: a = scale, b = -zero * scale.
      const float a = uni(rng) * 0.01f;
      const float zb = -static_cast<float>(byte(rng) % (type == BlockType::kU4_F32 ? 16 : 256)) * a;
      std::memcpy(blk, &a, 4);
      std::memcpy(blk + 4, &zb, 4);
    }
    info.decode(blk, &m.w[b * info.elems]);
  }
  return m;
}

std::vector<float> MakeActivations(int64_t rows, int64_t in, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(rows * in);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::exp2(static_cast<float>(r % 7) - 3.0f);
    for (int64_t k = 0; k < in; ++k) x[r * in + k] = g(rng) * scale;
    if (r % 5 == 2) std::fill(&x[r * in], &x[r * in] + 32, 0.0f);  // an all-zero block
  }
  return x;
}

// The bound of panel_format.h for output o of row r (dense types: fp32 rounding only).
double Bound(const std::vector<float>& w, const std::vector<float>& x, int64_t r, int64_t o,
             int64_t in, bool dense) {
  double act = 0, round = 0, abs_sum = 0;
  for (int64_t kb = 0; kb < in / 32; ++kb) {
    double amax = 0, wmax = 0;
    for (int k = 0; k < 32; ++k) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[r * in + kb * 32 + k])));
      wmax = std::max(wmax, std::fabs(static_cast<double>(w[o * in + kb * 32 + k])));
    }
    for (int k = 0; k < 32; ++k) {
      const double wk = std::fabs(static_cast<double>(w[o * in + kb * 32 + k]));
      act += wk * amax / 254.0;
      round += 8.0 * wmax * amax;
      abs_sum += wk * std::fabs(static_cast<double>(x[r * in + kb * 32 + k]));
    }
  }
  const double eps = std::ldexp(1.0, -24);
  if (dense) return (in + 4) * eps * abs_sum * 2 + 1e-30;
  return act * 1.0001 + (in / 32.0 + 4) * eps * round + 1e-30;
}

struct Case {
  std::vector<BlockType> types;  // one segment each
  std::vector<int64_t> seg_rows;
  int64_t in;
  // Per segment (empty: none): an input order (QuantSource::input_order), a random permutation
  // drawn per segment; segments with the same draw index share one order.
  std::vector<int> order_draw = {};
};

std::string CaseName(const Case& c, int64_t rows) {
  std::string s;
  for (size_t i = 0; i < c.types.size(); ++i)
    s += std::string(Info(c.types[i]).name) + "x" + std::to_string(c.seg_rows[i]) + " ";
  return s + "in=" + std::to_string(c.in) + " rows=" + std::to_string(rows);
}

// Runs a case through both kernels, checks bound, accumulate + bias and batch invariance.
void RunCase(const Case& c, const std::vector<int64_t>& batch_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Weights> ws;
  std::vector<QuantSource> src;
  int64_t out = 0;
  for (size_t i = 0; i < c.types.size(); ++i) {
    ws.push_back(MakeWeights(c.types[i], c.seg_rows[i], c.in, rng));
    out += c.seg_rows[i];
  }
  // Input orders: draw d > 0 is a shuffle seeded by d; 0 or absent: input order.
  std::vector<std::vector<int32_t>> orders(ws.size());
  for (size_t i = 0; i < c.order_draw.size(); ++i) {
    if (c.order_draw[i] == 0) continue;
    orders[i].resize(c.in);
    for (int64_t k = 0; k < c.in; ++k) orders[i][k] = static_cast<int32_t>(k);
    std::mt19937 shuffle(static_cast<uint32_t>(c.order_draw[i]));
    std::shuffle(orders[i].begin(), orders[i].end(), shuffle);
  }
  for (size_t i = 0; i < ws.size(); ++i) {
    const Weights& m = ws[i];
    src.push_back({m.type, m.data.data(), m.rows, m.row_bytes,
                   orders[i].empty() ? nullptr : orders[i].data()});
  }
  std::vector<float> w;  // stacked [out][in]
  for (const Weights& m : ws) w.insert(w.end(), m.w.begin(), m.w.end());
  absl::StatusOr<QuantMatrix> qm = QuantMatrix::Pack(src, c.in);
  ASSERT_TRUE(qm.ok()) << qm.status();
  ASSERT_EQ(qm->out_features(), out);
  ASSERT_EQ(qm->in_features(), c.in);
  std::vector<float> bias(out);
  for (int64_t o = 0; o < out; ++o) bias[o] = 0.25f * static_cast<float>(o % 9) - 1.0f;

  for (int64_t rows : batch_rows) {
    SCOPED_TRACE(CaseName(c, rows));
    const std::vector<float> x = MakeActivations(rows, c.in, rng);
    // What each segment's stored columns multiply: x, or x gathered by the segment's order.
    std::vector<std::vector<float>> xs(ws.size(), x);
    for (size_t i = 0; i < ws.size(); ++i) {
      if (orders[i].empty()) continue;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < c.in; ++k) xs[i][r * c.in + k] = x[r * c.in + orders[i][k]];
    }
    const int64_t y_stride = out + 3;
    std::vector<float> y_default;
    for (int kernel = 0; kernel < 3; ++kernel) {
      if (kernel == 2 && !internal::HasAvx2Kernels()) continue;
      SCOPED_TRACE(kernel == 0   ? "default kernel"
                   : kernel == 1 ? "portable kernel"
                                 : "avx2 kernel");
      auto run = [&](const float* xp, int64_t n, float* yp, const float* b, bool acc) {
        if (kernel == 0) {
          QuantLinear(xp, c.in, *qm, b, yp, y_stride, n, acc);
        } else if (kernel == 1) {
          internal::QuantLinearPortable(xp, c.in, *qm, b, yp, y_stride, n, acc);
        } else {
          internal::QuantLinearAvx2(xp, c.in, *qm, b, yp, y_stride, n, acc);
        }
      };
      // y = x w^T + bias, then y += x w^T (accumulate, no bias).
      std::vector<float> y(rows * y_stride, 1234.0f);
      run(x.data(), rows, y.data(), bias.data(), false);
      std::vector<float> y2 = y;
      run(x.data(), rows, y2.data(), nullptr, true);
      int bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          int64_t seg_end = 0;
          bool dense = false;
          size_t seg = 0;
          for (; seg < ws.size(); ++seg) {
            seg_end += ws[seg].rows;
            if (o < seg_end) {
              dense = Info(ws[seg].type).decode == nullptr;
              break;
            }
          }
          const std::vector<float>& xo = xs[seg];
          double ref = 0;
          for (int64_t k = 0; k < c.in; ++k)
            ref += static_cast<double>(w[o * c.in + k]) * xo[r * c.in + k];
          const double bound = Bound(w, xo, r, o, c.in, dense);
          const double got = y[r * y_stride + o] - static_cast<double>(bias[o]);
          if (std::fabs(got - ref) > bound + 1e-6 * std::fabs(bias[o]) && ++bad < 5) {
            ADD_FAILURE() << "row " << r << " out " << o << ": got " << got << " ref " << ref
                          << " bound " << bound;
          }
          // Accumulate adds the same product (bias not added again).
          const double acc = y2[r * y_stride + o] - y[r * y_stride + o];
          if (std::fabs(acc - ref) > bound + 1e-6 * std::fabs(y[r * y_stride + o]) && ++bad < 5) {
            ADD_FAILURE() << "accumulate row " << r << " out " << o << ": " << acc << " vs " << ref;
          }
        }
        EXPECT_EQ(y[r * y_stride + out], 1234.0f) << "wrote past the outputs";
      }
      // The AVX2 kernels compute the VNNI kernels' int32 sums and fp32 steps: same bits.
      if (kernel == 0) y_default = y;
      if (kernel == 2 && std::string(QuantKernelName(c.types[0])).rfind("avx512-vnni", 0) == 0) {
        for (int64_t i = 0; i < rows * y_stride; ++i)
          ASSERT_EQ(y[i], y_default[i]) << "element " << i;
      }
      // Batch invariance: each row alone gives the same bits as in the batch.
      for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 4)) {
        std::vector<float> y1(y_stride, 0.0f);
        run(&x[r * c.in], 1, y1.data(), bias.data(), false);
        for (int64_t o = 0; o < out; ++o)
          ASSERT_EQ(y1[o], y[r * y_stride + o]) << "row " << r << " out " << o;
      }
    }
  }
}

TEST(QuantLinear, EveryTypeEveryBatchShape) {
  const std::vector<int64_t> batches = {1, 3, 8, 37};
  uint32_t seed = 1;
  for (const TypeInfo& t : Types()) {
    const int64_t in = t.elems == 256 ? 512 : 96;    // 96: a padded unit for the 2-block schemes
    RunCase({{t.type}, {37}, in}, batches, seed++);  // 37 rows: tail panel of 5
    RunCase({{t.type}, {80}, t.elems == 256 ? 256 : 64}, {1, 2}, seed++);  // 5 panels: 4 + 1
  }
}

TEST(QuantLinear, MixedSegmentsLikeQ4KM) {
  // qkv of a Q4_K_M file: Q4_K q and k, Q6_K v; then Q8_0 and F16 rows stacked under them.
  RunCase(
      {{BlockType::kQ4_K, BlockType::kQ6_K, BlockType::kQ8_0, BlockType::kF16, BlockType::kQ5_0},
       {40, 24, 9, 5, 17},
       512},
      {1, 3, 8, 37}, 99);
}

// GPTQ act-order: segments whose stored columns are in another order than the activations
// (two distinct orders, one shared by two segments, beside a segment in input order).
TEST(QuantLinear, InputOrdersGatherTheActivations) {
  RunCase({{BlockType::kU4_F32, BlockType::kQ4_0, BlockType::kU8_F32, BlockType::kQ8_0},
           {24, 17, 16, 9},
           128,
           {1, 2, 1, 0}},
          {1, 3, 8, 37}, 11);
  RunCase({{BlockType::kU4_F32}, {40}, 96, {3}}, {1, 2}, 12);
}

TEST(QuantLinear, PrefillRowsRunInSlices) {
  // 4096 inputs: QuantLinear walks rows in slices of a few dozen; 100 rows span several.
  RunCase({{BlockType::kQ4_K, BlockType::kQ8_0}, {20, 12}, 4096}, {100}, 5);
}

TEST(QuantLinear, SameResultsWithOneOrTwoThreads) {
  std::mt19937 rng(7);
  const int64_t in = 1024, out = 96, rows = 12;
  Weights m = MakeWeights(BlockType::kQ4_K, out, in, rng);
  QuantSource s{m.type, m.data.data(), m.rows, m.row_bytes};
  absl::StatusOr<QuantMatrix> qm = QuantMatrix::Pack({&s, 1}, in);
  ASSERT_TRUE(qm.ok());
  const std::vector<float> x = MakeActivations(rows, in, rng);
  std::vector<float> y1(rows * out), y2(rows * out);
  const int before = ComputeThreads();
  SetComputeThreads(1);
  QuantLinear(x.data(), in, *qm, nullptr, y1.data(), out, rows, false);
  SetComputeThreads(2);
  QuantLinear(x.data(), in, *qm, nullptr, y2.data(), out, rows, false);
  SetComputeThreads(before);
  EXPECT_EQ(y1, y2);
}

TEST(QuantLinear, RejectsBadShapesNamingTheType) {
  std::vector<std::byte> data(4096);
  QuantSource s{BlockType::kQ4_K, data.data(), 2, 144};
  absl::StatusOr<QuantMatrix> qm = QuantMatrix::Pack({&s, 1}, 128);
  ASSERT_FALSE(qm.ok());
  EXPECT_NE(std::string(qm.status().message()).find("Q4_K"), std::string::npos) << qm.status();
  QuantSource bad{static_cast<BlockType>(16), data.data(), 2, 64};  // IQ2_S: no kernel
  qm = QuantMatrix::Pack({&bad, 1}, 32);
  ASSERT_FALSE(qm.ok());
  EXPECT_NE(std::string(qm.status().message()).find("16"), std::string::npos) << qm.status();
  QuantSource short_stride{BlockType::kQ8_0, data.data(), 2, 10};
  const std::vector<int32_t> not_a_permutation(64, 0);
  QuantSource bad_order{BlockType::kQ8_0, data.data(), 2, 68, not_a_permutation.data()};
  auto refused = QuantMatrix::Pack({&bad_order, 1}, 64);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("permutation"), std::string::npos);
  EXPECT_FALSE(QuantMatrix::Pack({&short_stride, 1}, 64).ok());
}

TEST(QuantLinear, BytesStayCloseToTheFile) {
  std::mt19937 rng(3);
  const int64_t in = 4096, out = 64;
  for (BlockType t :
       {BlockType::kQ4_0, BlockType::kQ8_0, BlockType::kQ4_K, BlockType::kQ5_K, BlockType::kQ6_K,
        BlockType::kU4_F32, BlockType::kU8_F32}) {  // U4/U8_F32: 6 and 10 bits per weight
    Weights m = MakeWeights(t, out, in, rng);
    QuantSource s{t, m.data.data(), m.rows, m.row_bytes};
    absl::StatusOr<QuantMatrix> qm = QuantMatrix::Pack({&s, 1}, in);
    ASSERT_TRUE(qm.ok());
    const double file = static_cast<double>(m.data.size());
    EXPECT_LE(static_cast<double>(qm->bytes()), file * 1.03) << Info(t).name;
    EXPECT_GE(static_cast<double>(qm->bytes()), file * 0.99) << Info(t).name;
  }
}

TEST(QuantLinear, KernelNames) {
  EXPECT_STRNE(QuantKernelName(BlockType::kQ4_K), "none");
  EXPECT_STRNE(QuantKernelName(BlockType::kMXFP4), "none");
  EXPECT_STREQ(QuantKernelName(static_cast<BlockType>(16)), "none");
}

}  // namespace
}  // namespace kvserve::kernels::cpu::quant
