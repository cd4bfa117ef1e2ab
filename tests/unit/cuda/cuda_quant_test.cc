// The quantized-weight CUDA kernels against float64 references written here from the layouts
// (quant_weight_layout.h, fp8_gemm.h), on random data. Needs a GPU (label gpu). Bounds, and why:
//   QuantGemv (rows 1..8)        |y − ref| <= 1e-5 · Σ|x·w| + 1e-6·|y0|: (q − z) and the
//                                fp16 scale are exact in fp32; the only error is fp32
//                                accumulation over < 100 rounding steps deep (chunk sums, lanes,
//                                shuffles, split parts), 100 · 2^-24 ≈ 6e-6
//   QuantLinear (rows > 8)       against W rounded to bf16/fp16 here (round to nearest even of
//                                the exact s·(q − z)): 1e-4 · Σ|x·w|, cuBLAS's fp32 accumulation
//   DequantizeGroupQuant         bit-exact against that rounding
//   QuantizeFp8PerTensor         bit-exact codes and scale: the same fp32 division, then round
//                                to the nearest e4m3 (ties to even), chosen here by search
//   Fp8Gemm                      1e-3 · Σ|x·w|·sx·sw: e4m3 products are exact, but Hopper's
//                                FP8 tensor cores accumulate with fewer bits than fp32
//   DequantizeFp8Scaled          bit-exact: fp32 product of e4m3 and scale, then bf16 RNE
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_linear.h"
#include "kernels/cuda/quant_weight_layout.h"

namespace kvserve::kernels::cuda {
namespace {

template <typename T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    EXPECT_EQ(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> Host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  size_t n_;
  T* p_ = nullptr;
};

double Bf16Value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half: sign, 5-bit exponent (bias 15), 10-bit mantissa.
double HalfValue(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Round a float to bf16, nearest even (finite inputs).
uint16_t RoundBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

uint16_t RoundHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// e4m3 (fn): sign, 4-bit exponent (bias 7), 3-bit mantissa; 0x7f/0xff are NaN, no infinities.
double E4m3Value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (c & 0x80) ? -mag : mag;
}

// Nearest e4m3 code to v, ties to the even code (mantissa bit 0), saturating at ±448.
uint8_t NearestE4m3(double v) {
  const double a = std::min(std::fabs(v), 448.0);
  int best = 0;
  for (int c = 1; c < 0x7f; ++c) {
    const double d = std::fabs(E4m3Value(static_cast<uint8_t>(c)) - a),
                 db = std::fabs(E4m3Value(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(std::signbit(v) ? best | 0x80
                                              : best);  // the sign survives rounding to 0
}

// Random activations: bf16 or fp16 bit patterns of magnitude about 2^-3..2^1, either sign.
std::vector<uint16_t> RandomActs(size_t n, bool fp16, std::mt19937& rng) {
  std::uniform_int_distribution<int> sign(0, 1), exp(-3, 1), mant(0, 1023);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const int s = sign(rng), e = exp(rng), m = mant(rng);
    x = fp16 ? static_cast<uint16_t>((s << 15) | ((e + 15) << 10) | m)
             : static_cast<uint16_t>((s << 15) | ((e + 127) << 7) | (m & 127));
  }
  return v;
}

struct QuantCase {
  GroupQuantShape shape;
  std::vector<uint8_t> codes;    // plain, [out][in]
  std::vector<uint16_t> scales;  // fp16, [out][in/group]
  std::vector<uint8_t> zeros;    // [out][in/group] or empty
  double W(int o, int i) const {
    const size_t g = static_cast<size_t>(o) * shape.groups_per_row() + i / shape.group;
    const int z = shape.has_zeros ? zeros[g] : shape.symmetric_zero();
    return HalfValue(scales[g]) * (codes[static_cast<size_t>(o) * shape.in + i] - z);
  }
};

QuantCase RandomQuant(const GroupQuantShape& s, std::mt19937& rng) {
  QuantCase c{s, {}, {}, {}};
  std::uniform_int_distribution<int> code(0, (1 << s.bits) - 1), exp(5, 11), mant(0, 1023);
  c.codes.resize(static_cast<size_t>(s.out) * s.in);
  for (auto& q : c.codes) q = static_cast<uint8_t>(code(rng));
  const size_t ng = static_cast<size_t>(s.out) * s.groups_per_row();
  for (size_t g = 0; g < ng; ++g)
    c.scales.push_back(static_cast<uint16_t>((exp(rng) << 10) | mant(rng)));
  if (s.has_zeros) {
    for (size_t g = 0; g < ng; ++g) c.zeros.push_back(static_cast<uint8_t>(code(rng)));
  }
  return c;
}

struct DeviceQuant {
  explicit DeviceQuant(const QuantCase& c)
      : packed(PackGroupQuantWeight(c.shape, c.codes, c.scales, c.zeros).value()),
        codes(packed.codes),
        scales(packed.scales),
        zeros(packed.zeros) {}
  QuantWeightView View() const {
    return {packed.shape, codes.get(), scales.get(),
            packed.shape.has_zeros ? zeros.get() : nullptr};
  }
  PackedGroupQuantWeight packed;
  Dev<uint8_t> codes;
  Dev<uint16_t> scales;
  Dev<uint8_t> zeros;
};

// Runs QuantLinear for every row count and checks it against the float64 reference (rounded
// weights for the batched path).
void CheckQuantLinear(const GroupQuantShape& shape, bool fp16, bool accumulate, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "bits " << shape.bits << " out " << shape.out << " in "
                                  << shape.in << " group " << shape.group << " zeros "
                                  << shape.has_zeros << " fp16 " << fp16 << " accumulate "
                                  << accumulate);
  std::mt19937 rng(seed);
  const QuantCase qc = RandomQuant(shape, rng);
  const DeviceQuant dq(qc);
  const GemmDtype act = fp16 ? GemmDtype::kFp16 : GemmDtype::kBf16;
  auto gemm = CublasGemm::Create(nullptr);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  Dev<uint8_t> workspace(QuantLinearWorkspaceBytes(shape));
  const int in = shape.in, out = shape.out;
  // W exactly, and rounded to the activations' dtype (what the batched path multiplies).
  std::vector<double> w_exact(static_cast<size_t>(out) * in), w_rounded(w_exact.size());
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) {
      const double w = qc.W(o, i);
      w_exact[static_cast<size_t>(o) * in + i] = w;
      w_rounded[static_cast<size_t>(o) * in + i] =
          fp16 ? HalfValue(RoundHalf(static_cast<float>(w)))
               : Bf16Value(RoundBf16(static_cast<float>(w)));
    }
  }
  for (int rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 33}) {
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    const std::vector<uint16_t> x = RandomActs(static_cast<size_t>(rows) * in, fp16, rng);
    std::vector<float> y0(static_cast<size_t>(rows) * out);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : y0) v = u(rng);
    Dev<uint16_t> dx(x);
    Dev<float> dy(y0);
    const absl::Status st =
        QuantLinear(**gemm, act, dx.get(), in, dq.View(), dy.get(), out, rows, accumulate,
                    workspace.get(), QuantLinearWorkspaceBytes(shape));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> y = dy.Host();
    const bool gemv = rows <= 8;
    const std::vector<double>& wm = gemv ? w_exact : w_rounded;
    std::vector<double> xd(x.size());
    for (size_t k = 0; k < x.size(); ++k) xd[k] = fp16 ? HalfValue(x[k]) : Bf16Value(x[k]);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double ref = accumulate ? y0[static_cast<size_t>(r) * out + o] : 0.0, mag = 0.0;
        for (int i = 0; i < in; ++i) {
          const double p =
              xd[static_cast<size_t>(r) * in + i] * wm[static_cast<size_t>(o) * in + i];
          ref += p;
          mag += std::fabs(p);
        }
        const double bound = (gemv ? 1e-5 : 1e-4) * mag + 1e-6 * std::fabs(ref) + 1e-30;
        ASSERT_NEAR(y[static_cast<size_t>(r) * out + o], ref, bound)
            << "row " << r << " output " << o;
      }
    }
  }
}

TEST(CudaQuant, GemvAndBatchedMatchFloat64EveryBitsGroupAndZeroChoice) {
  uint32_t seed = 1;
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (bool zeros : {false, true}) {
        CheckQuantLinear({bits, 200, 1024, group, zeros}, /*fp16=*/false, /*accumulate=*/false,
                         seed++);
      }
    }
  }
}

TEST(CudaQuant, Fp16ActivationsAndAccumulate) {
  CheckQuantLinear({4, 136, 512, 128, true}, /*fp16=*/true, /*accumulate=*/true, 21);
  CheckQuantLinear({8, 136, 512, 64, false}, /*fp16=*/true, /*accumulate=*/false, 22);
  CheckQuantLinear({4, 136, 512, 32, false}, /*fp16=*/false, /*accumulate=*/true, 23);
}

TEST(CudaQuant, LongRowsSplitAcrossWarps) {
  // Few long rows: the GEMV splits each row over several warps (4096 inputs: 4 for int4, 8 for
  // int8).
  CheckQuantLinear({4, 72, 4096, 128, true}, /*fp16=*/false, /*accumulate=*/false, 31);
  CheckQuantLinear({8, 72, 4096, 32, false}, /*fp16=*/false, /*accumulate=*/false, 32);
}

TEST(CudaQuant, DequantizeIsBitExact) {
  std::mt19937 rng(41);
  for (int bits : {4, 8}) {
    for (bool fp16 : {false, true}) {
      const GroupQuantShape s{bits, 40, 256, 64, bits == 4};
      const QuantCase qc = RandomQuant(s, rng);
      const DeviceQuant dq(qc);
      Dev<uint16_t> dst(static_cast<size_t>(s.out) * s.in);
      ASSERT_EQ(DequantizeGroupQuant(dq.View(), fp16 ? GemmDtype::kFp16 : GemmDtype::kBf16,
                                     dst.get(), nullptr),
                0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint16_t> got = dst.Host();
      for (int o = 0; o < s.out; ++o) {
        for (int i = 0; i < s.in; ++i) {
          const auto w = static_cast<float>(qc.W(o, i));  // exact: an 11-bit scale times <= 8 bits
          ASSERT_EQ(got[static_cast<size_t>(o) * s.in + i], fp16 ? RoundHalf(w) : RoundBf16(w))
              << "bits " << bits << " fp16 " << fp16 << " element " << o << "," << i;
        }
      }
    }
  }
}

TEST(CudaQuant, GemvRefusesWhatItCannotTake) {
  const GroupQuantShape s{4, 8, 64, 32, false};
  const QuantWeightView bad_shape{{4, 8, 48, 32, false}, nullptr, nullptr, nullptr};
  EXPECT_FALSE(QuantGemvApplies(GemmDtype::kBf16, nullptr, 64, bad_shape, 1));
  std::mt19937 rng(51);
  const DeviceQuant dq(RandomQuant(s, rng));
  Dev<uint16_t> x(64 * 9);
  EXPECT_TRUE(QuantGemvApplies(GemmDtype::kBf16, x.get(), 64, dq.View(), 8));
  EXPECT_FALSE(QuantGemvApplies(GemmDtype::kBf16, x.get(), 64, dq.View(), 9));
  EXPECT_FALSE(QuantGemvApplies(GemmDtype::kFp32, x.get(), 64, dq.View(), 1));
  EXPECT_FALSE(QuantGemvApplies(GemmDtype::kBf16, x.get() + 1, 64, dq.View(), 1));
  auto gemm = CublasGemm::Create(nullptr);
  ASSERT_TRUE(gemm.ok());
  Dev<float> y(8 * 9);
  // 9 rows without a workspace: a clear error, not a launch.
  const absl::Status st = QuantLinear(**gemm, GemmDtype::kBf16, x.get(), 64, dq.View(), y.get(), 8,
                                      9, false, nullptr, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

int ComputeCapability() {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

std::vector<uint8_t> RandomE4m3(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> b(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& c : v) {
    do c = static_cast<uint8_t>(b(rng));
    while ((c & 0x7f) == 0x7f);  // NaN
  }
  return v;
}

TEST(CudaQuant, Fp8GemmMatchesFloat64OrRefusesOldGpus) {
  auto fp8 = Fp8Gemm::Create(nullptr);
  if (ComputeCapability() < 89) {
    ASSERT_FALSE(fp8.ok());
    EXPECT_EQ(fp8.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(fp8.status().message().find("8.9"), std::string::npos) << fp8.status();
    return;
  }
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  std::mt19937 rng(61);
  const int in = 256, out = 128;
  const std::vector<uint8_t> w = RandomE4m3(static_cast<size_t>(out) * in, rng);
  const std::vector<float> scales = {0.0125f, 0.03f};  // x, w
  Dev<uint8_t> dw(w);
  Dev<float> dscales(scales);
  for (bool accumulate : {false, true}) {
    for (int rows : {1, 8, 16, 64}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " accumulate " << accumulate);
      const std::vector<uint8_t> x = RandomE4m3(static_cast<size_t>(rows) * in, rng);
      std::vector<float> y0(static_cast<size_t>(rows) * out, 0.5f);
      Dev<uint8_t> dx(x);
      Dev<float> dy(y0);
      const absl::Status st =
          (*fp8)->Linear(dx.get(), in, dscales.get(), dw.get(), dscales.get() + 1, dy.get(), out,
                         rows, in, out, accumulate);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> y = dy.Host();
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < out; ++o) {
          double ref = 0.0, mag = 0.0;
          for (int i = 0; i < in; ++i) {
            const double p = E4m3Value(x[static_cast<size_t>(r) * in + i]) *
                             E4m3Value(w[static_cast<size_t>(o) * in + i]);
            ref += p;
            mag += std::fabs(p);
          }
          const double sc = static_cast<double>(scales[0]) * scales[1];
          ref = ref * sc + (accumulate ? 0.5 : 0.0);
          ASSERT_NEAR(y[static_cast<size_t>(r) * out + o], ref, 1e-3 * mag * sc + 1e-6)
              << r << "," << o;
        }
      }
    }
  }
  // Shapes cuBLASLt's FP8 path cannot take are refused before any launch.
  Dev<float> dy(64);
  EXPECT_EQ((*fp8)
                ->Linear(dw.get(), 24, dscales.get(), dw.get(), dscales.get(), dy.get(), 16, 1, 24,
                         16, false)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaQuant, Fp8ActivationQuantizationIsBitExact) {
  std::mt19937 rng(71);
  for (bool fp16 : {false, true}) {
    const int rows = 5, in = 320, stride = 328;
    std::vector<uint16_t> x = RandomActs(static_cast<size_t>(rows) * stride, fp16, rng);
    Dev<uint16_t> dx(x);
    Dev<uint8_t> q(static_cast<size_t>(rows) * in);
    Dev<float> scale(1);
    ASSERT_EQ(QuantizeFp8PerTensor(fp16 ? GemmDtype::kFp16 : GemmDtype::kBf16, dx.get(), stride,
                                   rows, in, q.get(), scale.get(), nullptr),
              0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    float amax = 0.0f;
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < in; ++i) {
        const uint16_t b = x[static_cast<size_t>(r) * stride + i];
        amax = std::max(amax, static_cast<float>(std::fabs(fp16 ? HalfValue(b) : Bf16Value(b))));
      }
    }
    const float want_scale = amax / 448.0f;
    ASSERT_EQ(scale.Host()[0], want_scale);
    const std::vector<uint8_t> got = q.Host();
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < in; ++i) {
        const uint16_t b = x[static_cast<size_t>(r) * stride + i];
        const float v = static_cast<float>(fp16 ? HalfValue(b) : Bf16Value(b)) / want_scale;
        ASSERT_EQ(got[static_cast<size_t>(r) * in + i], NearestE4m3(v))
            << "fp16 " << fp16 << " at " << r << "," << i;
      }
    }
  }
}

TEST(CudaQuant, Fp8ScaledDequantizeIsBitExact) {
  std::mt19937 rng(81);
  const int out = 200, in = 300;  // partial 128x128 blocks on both edges
  const std::vector<uint8_t> w = RandomE4m3(static_cast<size_t>(out) * in, rng);
  Dev<uint8_t> dw(w);
  // 128x128 blocks, per channel, per tensor.
  for (auto [bo, bi] : {std::pair{128, 128}, std::pair{1, in}, std::pair{out, in}}) {
    SCOPED_TRACE(testing::Message() << "block " << bo << "x" << bi);
    const int nbo = (out + bo - 1) / bo, nbi = (in + bi - 1) / bi;
    std::vector<float> scales(static_cast<size_t>(nbo) * nbi);
    std::uniform_real_distribution<float> u(1e-4f, 1e-2f);
    for (auto& s : scales) s = u(rng);
    Dev<float> ds(scales);
    Dev<uint16_t> dst(static_cast<size_t>(out) * in);
    ASSERT_EQ(DequantizeFp8Scaled(dw.get(), ds.get(), out, in, bo, bi, dst.get(), nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> got = dst.Host();
    for (int o = 0; o < out; ++o) {
      for (int i = 0; i < in; ++i) {
        // The product of a 4-bit and a 24-bit significand is exact in double; round it to float.
        const auto v = static_cast<float>(E4m3Value(w[static_cast<size_t>(o) * in + i]) *
                                          scales[static_cast<size_t>(o / bo) * nbi + i / bi]);
        ASSERT_EQ(got[static_cast<size_t>(o) * in + i], RoundBf16(v)) << o << "," << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels::cuda
