// The CUDA Llama kernels (kernels/cuda/llama_kernels.h, gemm.h) against their CPU twins on
// random inputs. Tolerances, and why:
//   WriteKv (every dtype)           bit-exact codes and scales: same algorithm, no FMA, IEEE ops
//   ApplyRope, ToBf16, AddBias,
//   EmbeddingGather                 bit-exact: one rounded op per output, same table
//   RmsNorm                         1e-5 relative: the fp32 sum of squares runs in another order
//   SiluMul                         2e-6 relative: device expf is within 2 ulp of glibc's
//   GreedySample(Masked)            token exact (first maximum wins ties, grammar masks as the
//                                   CPU sampler's `allowed`); logprob 1e-5 absolute (double sums
//                                   in another order, then rounded to float)
//   CublasGemm fp32                 1e-5 * sqrt(in) absolute: fp32 FMA order (TF32 is off)
//   CublasGemm bf16                 same on bf16-rounded inputs: products of bf16 are exact in fp32
// Needs a GPU (label gpu).
#include "kernels/cuda/llama_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cache/host_kv_storage.h"
#include "config/fields.h"
#include "cuda/cuda_kv_storage.h"
#include "cuda/device_array.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/device_probe.h"
#include "model/device_plan.h"
#include "model/sampler.h"

namespace kvserve::kernels::cuda {
namespace {

using config::KvDtype;

// A device copy of a host vector, freed at scope exit.
template <typename T>
using DeviceVec = kvserve::cuda::DeviceArray<T>;

std::vector<float> Normal(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class CudaLlamaKernels : public testing::Test {
 protected:
  void SetUp() override {
    const DeviceProbe probe = ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  }
};

TEST_F(CudaLlamaKernels, WriteKvCodesAreBitIdenticalToTheCpu) {
  std::mt19937 rng(11);
  for (KvDtype dtype : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    for (int hd : {48, 64, 128}) {
      for (int bs : {16, 32}) {
        for (int kv_heads : {1, 2, 8}) {
          SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(dtype) << " hd " << hd << " bs " << bs
                                          << " kv_heads " << kv_heads);
          cache::KvLayout l;
          l.num_layers = 1;
          l.num_kv_heads = kv_heads;
          l.head_dim = hd;
          l.block_size = bs;
          l.dtype = dtype;
          const int32_t blocks = 9;
          const int64_t rows = 37;  // odd
          const int64_t stride = 2 * static_cast<int64_t>(kv_heads) * hd + 3;  // k then v, padded
          std::vector<float> kv = Normal(static_cast<size_t>(rows * stride), rng, 2.0f);
          // Edge rows: all zero (scale 0), tiny (fp16/fp8 subnormals), large (fp16 overflow, fp8 saturation).
          for (int64_t c = 0; c < stride; ++c) {
            kv[static_cast<size_t>(c)] = 0.0f;
            kv[static_cast<size_t>(stride + c)] *= 1e-6f;
            kv[static_cast<size_t>(2 * stride + c)] *= 4e4f;
          }
          // Distinct slots in shuffled order over blocks 1..8; every 5th row writes nothing.
          std::vector<int64_t> slots(static_cast<size_t>((blocks - 1) * bs));
          std::iota(slots.begin(), slots.end(), bs);
          std::shuffle(slots.begin(), slots.end(), rng);
          slots.resize(static_cast<size_t>(rows));
          for (int64_t r = 4; r < rows; r += 5) slots[static_cast<size_t>(r)] = -1;

          auto host = std::move(cache::HostKvStorage::Create(l, blocks)).value();
          cpu::WriteKv(l, host->layer_data(0), host->layer_scales(0), kv.data(), kv.data() + kv_heads * hd, stride,
                       slots.data(), rows);
          auto dev = std::move(kvserve::cuda::CudaKvStorage::Create(l, blocks)).value();
          DeviceVec<float> dkv(kv);
          DeviceVec<int64_t> dslots(slots);
          ASSERT_EQ(WriteKv(l, dev->device_layer_data(0), dev->device_layer_scales(0), dkv.get(),
                            dkv.get() + kv_heads * hd, stride, dslots.get(), rows, dev->stream()),
                    0);
          auto back = std::move(cache::HostKvStorage::Create(l, blocks)).value();
          std::vector<cache::BlockCopy> all;
          for (int32_t b = 0; b < blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
          ASSERT_TRUE(dev->copy_blocks_to(*back, all).ok());
          ASSERT_TRUE(dev->synchronize().ok());
          const size_t data_bytes = static_cast<size_t>(blocks) * l.block_data_bytes();
          EXPECT_EQ(std::memcmp(back->layer_data(0), host->layer_data(0), data_bytes), 0) << "KV codes differ";
          if (l.has_scales()) {
            const size_t n = static_cast<size_t>(blocks) * l.block_scales();
            EXPECT_EQ(std::memcmp(back->layer_scales(0), host->layer_scales(0), n * sizeof(float)), 0)
                << "scales differ";
          }
        }
      }
    }
  }
}

// Split K/V dtypes and int4: the codes and scales are the CPU's, bit for bit, over two steps
// of writes, as a sequence sees them: step 1 prefills a chunk that starts inside a block and
// spans blocks (int4 keys: one encoding per run) next to decode tokens of other sequences and
// padding; step 2 appends to the same blocks (int4 keys: a channel whose range grows re-encodes
// the rows already there). The pools are compared whole.
TEST_F(CudaLlamaKernels, WriteKvCodesAreBitIdenticalForSplitAndInt4Precisions) {
  std::mt19937 rng(23);
  const std::pair<KvDtype, KvDtype> pairs[] = {
      {KvDtype::kInt4, KvDtype::kInt4}, {KvDtype::kInt8, KvDtype::kInt4}, {KvDtype::kInt4, KvDtype::kInt8},
      {KvDtype::kBf16, KvDtype::kInt4}, {KvDtype::kFp16, KvDtype::kInt8}, {KvDtype::kInt4, KvDtype::kFp8E4M3},
      {KvDtype::kFp32, KvDtype::kBf16}};
  for (auto [kd, vd] : pairs) {
    for (int hd : {48, 64, 128}) {
      for (int bs : {16, 32}) {
        for (int kv_heads : {1, 2, 8}) {
          const int group = hd == 48 ? 32 : 16;
          SCOPED_TRACE(testing::Message() << config::Name(kd) << "/" << config::Name(vd) << " hd " << hd << " bs "
                                          << bs << " kv_heads " << kv_heads << " group " << group);
          cache::KvLayout l;
          l.num_layers = 1;
          l.num_kv_heads = kv_heads;
          l.head_dim = hd;
          l.block_size = bs;
          l = cache::WithPrecision(l, kd, vd, group);
          const int32_t blocks = 9;
          std::vector<int32_t> ids(static_cast<size_t>(blocks - 1));
          std::iota(ids.begin(), ids.end(), 1);
          std::shuffle(ids.begin(), ids.end(), rng);
          // Sequence A owns ids[0..2] and writes positions [3, bs + 9) then [bs + 9, 2 bs + 5);
          // sequences B and C (ids[3], ids[4]) one decode token per step.
          auto slot_a = [&](int pos) { return static_cast<int64_t>(ids[static_cast<size_t>(pos / bs)]) * bs + pos % bs; };
          std::vector<std::vector<int64_t>> steps(2);
          for (int pos = 3; pos < bs + 9; ++pos) steps[0].push_back(slot_a(pos));
          steps[0].push_back(-1);
          steps[0].push_back(static_cast<int64_t>(ids[3]) * bs + 0);
          steps[0].push_back(static_cast<int64_t>(ids[4]) * bs + 5);
          steps[1].push_back(static_cast<int64_t>(ids[3]) * bs + 1);
          for (int pos = bs + 9; pos < 2 * bs + 5; ++pos) steps[1].push_back(slot_a(pos));
          steps[1].push_back(-1);
          steps[1].push_back(static_cast<int64_t>(ids[4]) * bs + 6);

          auto host = std::move(cache::HostKvStorage::Create(l, blocks)).value();
          auto dev = std::move(kvserve::cuda::CudaKvStorage::Create(l, blocks)).value();
          for (size_t st = 0; st < steps.size(); ++st) {
            const auto& slots = steps[st];
            const auto rows = static_cast<int64_t>(slots.size());
            const int64_t stride = 2 * static_cast<int64_t>(kv_heads) * hd + 3;  // k then v, padded
            // The second step is wider, so int4 key channels must widen.
            std::vector<float> kv = Normal(static_cast<size_t>(rows * stride), rng, st == 0 ? 1.0f : 3.0f);
            cpu::WriteKv(l, host->layer_data(0), host->layer_scales(0), kv.data(), kv.data() + kv_heads * hd, stride,
                         slots.data(), rows);
            DeviceVec<float> dkv(kv);
            DeviceVec<int64_t> dslots(slots);
            ASSERT_EQ(WriteKv(l, dev->device_layer_data(0), dev->device_layer_scales(0), dkv.get(),
                              dkv.get() + kv_heads * hd, stride, dslots.get(), rows, dev->stream()),
                      0);
            ASSERT_TRUE(dev->synchronize().ok());
          }
          auto back = std::move(cache::HostKvStorage::Create(l, blocks)).value();
          std::vector<cache::BlockCopy> all;
          for (int32_t b = 0; b < blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
          ASSERT_TRUE(dev->copy_blocks_to(*back, all).ok());
          ASSERT_TRUE(dev->synchronize().ok());
          const size_t data_bytes = static_cast<size_t>(blocks) * l.block_data_bytes();
          EXPECT_EQ(std::memcmp(back->layer_data(0), host->layer_data(0), data_bytes), 0) << "KV codes differ";
          const size_t n = static_cast<size_t>(blocks) * l.block_scales();
          if (n > 0) {
            EXPECT_EQ(std::memcmp(back->layer_scales(0), host->layer_scales(0), n * sizeof(float)), 0)
                << "scales differ";
          }
        }
      }
    }
  }
}

TEST_F(CudaLlamaKernels, RopeIsBitIdenticalWithTheModelsTable) {
  std::mt19937 rng(3);
  for (int hd : {64, 128}) {
    const int64_t rows = 29;
    const int heads = 12;  // e.g. 8 query + 4 key heads rotated in one call
    const int64_t stride = static_cast<int64_t>(heads) * hd + 16;
    std::vector<int32_t> positions(static_cast<size_t>(rows));
    for (auto& p : positions) p = static_cast<int32_t>(rng() % 100000);
    std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
    for (int f = 0; f < hd / 2; ++f) inv_freq[static_cast<size_t>(f)] = std::pow(500000.0f, -2.0f * f / hd);
    std::vector<float> cos_sin(static_cast<size_t>(rows * hd));
    cpu::RopeCosSin(positions.data(), rows, inv_freq.data(), hd / 2, cos_sin.data());
    std::vector<float> x = Normal(static_cast<size_t>(rows * stride), rng);
    DeviceVec<float> dx(x), dcs(cos_sin);
    ASSERT_EQ(ApplyRope(dx.get(), rows, heads, hd, stride, dcs.get(), nullptr), 0);
    cpu::ApplyRope(x.data(), rows, heads, hd, stride, cos_sin.data());
    const std::vector<float> got = dx.ToHost(x.size());
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&got[i], &x[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << "head_dim " << hd;
  }
}

TEST_F(CudaLlamaKernels, RmsNormMatchesWithinSummationOrder) {
  std::mt19937 rng(5);
  for (int dim : {192, 2048, 4095}) {
    const int64_t rows = 17, stride = dim + 5;
    std::vector<float> x = Normal(static_cast<size_t>(rows * stride), rng, 3.0f);
    std::vector<float> w = Normal(static_cast<size_t>(dim), rng);
    std::vector<float> ref(static_cast<size_t>(rows * dim));
    cpu::RmsNorm(x.data(), stride, w.data(), ref.data(), dim, rows, dim, 1e-5f);
    DeviceVec<float> dx(x), dw(w), dout(ref.size());
    ASSERT_EQ(RmsNorm(dx.get(), stride, nullptr, dw.get(), dout.get(), dim, rows, dim, 1e-5f, nullptr), 0);
    const std::vector<float> got = dout.ToHost(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(got[i], ref[i], 1e-5f * std::fabs(ref[i]) + 1e-6f) << "dim " << dim << " i " << i;
    }
    // The bf16 variant writes exactly the bf16 codes of the fp32 result (same sum order).
    DeviceVec<uint16_t> dcodes(ref.size());
    ASSERT_EQ(RmsNormBf16(dx.get(), stride, nullptr, dw.get(), dcodes.get(), dim, rows, dim, 1e-5f, nullptr), 0);
    const std::vector<uint16_t> codes = dcodes.ToHost(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(codes[i], cpu::FloatToBf16(got[i])) << "dim " << dim << " i " << i;
    // Gathering rows (the final norm of the logits rows): rows 16, 3, 3, 0.
    const std::vector<int32_t> pick{16, 3, 3, 0};
    DeviceVec<int32_t> dpick(pick);
    DeviceVec<float> dg(pick.size() * static_cast<size_t>(dim));
    ASSERT_EQ(RmsNorm(dx.get(), stride, dpick.get(), dw.get(), dg.get(), dim, 4, dim, 1e-5f, nullptr), 0);
    const std::vector<float> gathered = dg.ToHost(pick.size() * static_cast<size_t>(dim));
    for (size_t r = 0; r < pick.size(); ++r) {
      for (int i = 0; i < dim; ++i) {
        ASSERT_EQ(gathered[r * static_cast<size_t>(dim) + static_cast<size_t>(i)],
                  got[static_cast<size_t>(pick[r]) * static_cast<size_t>(dim) + static_cast<size_t>(i)]);
      }
    }
  }
}

TEST_F(CudaLlamaKernels, SiluMulBiasBf16AndEmbedding) {
  std::mt19937 rng(9);
  const int64_t rows = 13;
  const int inter = 333;
  std::vector<float> gu = Normal(static_cast<size_t>(rows * 2 * inter), rng, 4.0f);
  std::vector<float> ref(static_cast<size_t>(rows * inter));
  cpu::SiluMul(gu.data(), rows, inter, ref.data());
  DeviceVec<float> dgu(gu), dout(ref.size());
  ASSERT_EQ(SiluMul(dgu.get(), rows, inter, dout.get(), nullptr), 0);
  const std::vector<float> got = dout.ToHost(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-6f * std::fabs(ref[i]) + 1e-30f) << i;
  DeviceVec<uint16_t> dact(ref.size());
  ASSERT_EQ(SiluMulBf16(dgu.get(), rows, inter, dact.get(), nullptr), 0);
  const std::vector<uint16_t> act = dact.ToHost(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(act[i], cpu::FloatToBf16(got[i])) << i;

  // AddBias over a strided matrix; the padding columns stay untouched.
  std::vector<float> y = Normal(static_cast<size_t>(rows * 40), rng), bias = Normal(33, rng);
  DeviceVec<float> dy(y), db(bias);
  ASSERT_EQ(AddBias(dy.get(), 40, db.get(), rows, 33, nullptr), 0);
  const std::vector<float> yb = dy.ToHost(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < 40; ++c) {
      const size_t i = static_cast<size_t>(r * 40 + c);
      ASSERT_EQ(yb[i], c < 33 ? y[i] + bias[static_cast<size_t>(c)] : y[i]);
    }
  }

  // bf16 rounding, including ties and NaN.
  std::vector<float> x = Normal(static_cast<size_t>(rows * 50), rng, 100.0f);
  x[0] = 1.0f + 0x1.0p-8f;  // exact tie, rounds to even
  x[1] = std::nanf("");
  DeviceVec<float> dxf(x);
  DeviceVec<uint16_t> dcodes(static_cast<size_t>(rows * 48));
  ASSERT_EQ(ToBf16(dxf.get(), 50, rows, 48, dcodes.get(), nullptr), 0);
  const std::vector<uint16_t> codes = dcodes.ToHost(static_cast<size_t>(rows * 48));
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < 48; ++c) {
      ASSERT_EQ(codes[static_cast<size_t>(r * 48 + c)], cpu::FloatToBf16(x[static_cast<size_t>(r * 50 + c)]));
    }
  }

  // Embedding rows.
  const int vocab = 100, dim = 70;
  std::vector<float> embed = Normal(static_cast<size_t>(vocab * dim), rng);
  const std::vector<int32_t> ids{5, 99, 0, 5, 42};
  DeviceVec<float> de(embed), dx(ids.size() * dim);
  DeviceVec<int32_t> did(ids);
  ASSERT_EQ(EmbeddingGather(de.get(), dim, did.get(), static_cast<int64_t>(ids.size()), dx.get(), nullptr), 0);
  const std::vector<float> rowsv = dx.ToHost(ids.size() * dim);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int c = 0; c < dim; ++c) {
      ASSERT_EQ(rowsv[r * dim + static_cast<size_t>(c)], embed[static_cast<size_t>(ids[r] * dim + c)]);
    }
  }
}

// The device's greedy tokens and logprobs of `rows` rows against model::Sampler's greedy
// draw on the same logits (with each row's grammar mask, when `allowed` is given).
void ExpectSameAsTheCpuSampler(const std::vector<float>& logits, int rows, int vocab, const DeviceVec<int32_t>& dt,
                               const DeviceVec<float>& dlp,
                               const std::vector<std::vector<uint64_t>>* allowed = nullptr) {
  const std::vector<int32_t> tokens = dt.ToHost(static_cast<size_t>(rows));
  const std::vector<float> lps = dlp.ToHost(static_cast<size_t>(rows));
  ASSERT_EQ(tokens.size(), static_cast<size_t>(rows));
  ASSERT_EQ(lps.size(), static_cast<size_t>(rows));
  model::Sampler sampler(vocab);
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  for (int r = 0; r < rows; ++r) {
    model::SamplerRng unused(0);
    const std::span<const uint64_t> mask =
        allowed != nullptr ? std::span<const uint64_t>((*allowed)[static_cast<size_t>(r)]) : std::span<const uint64_t>();
    const model::SampleResult want = sampler.Sample(
        std::span<const float>(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab)), p, {}, {},
        unused, mask);
    EXPECT_EQ(tokens[static_cast<size_t>(r)], want.token) << "vocab " << vocab << " row " << r;
    // The logprob is the raw row's, as the CPU sampler reports it.
    EXPECT_NEAR(lps[static_cast<size_t>(r)], want.logprob, 1e-5f) << "vocab " << vocab << " row " << r;
  }
}

TEST_F(CudaLlamaKernels, GreedySampleMatchesTheCpuSampler) {
  std::mt19937 rng(21);
  for (int vocab : {2048, 32000, 128256}) {
    const int rows = 9;
    std::vector<float> logits = Normal(static_cast<size_t>(rows * vocab), rng, 3.0f);
    // Row 1: a tie between two maxima (lowest id wins); row 2: the max at the last id.
    logits[static_cast<size_t>(vocab + 700)] = 50.0f;
    logits[static_cast<size_t>(vocab + 1900)] = 50.0f;
    logits[static_cast<size_t>(3 * vocab - 1)] = 60.0f;
    DeviceVec<float> dl(logits);
    DeviceVec<int32_t> dt(static_cast<size_t>(rows));
    DeviceVec<float> dlp(static_cast<size_t>(rows));
    ASSERT_EQ(GreedySample(dl.get(), rows, vocab, dt.get(), dlp.get(), nullptr), 0);
    ExpectSameAsTheCpuSampler(logits, rows, vocab, dt, dlp);
    const std::vector<int32_t> tokens = dt.ToHost();
    EXPECT_EQ(tokens[1], 700);
    EXPECT_EQ(tokens[2], vocab - 1);
  }
}

TEST_F(CudaLlamaKernels, MaskedGreedySampleMatchesTheCpuSamplerWithAGrammarMask) {
  std::mt19937 rng(22);
  for (int vocab : {2048, 32000, 32003}) {
    const int rows = 6;
    const int words = (vocab + 63) / 64;
    std::vector<float> logits = Normal(static_cast<size_t>(rows * vocab), rng, 3.0f);
    // Row r's mask: every token with (id * 7 + r) % 5 == 0, except row 3 (unconstrained) and
    // row 4 (one allowed token, far below the raw maximum), row 5 (a grammar mask shorter than
    // the vocabulary: ids past it are never allowed).
    model::DeviceMasks masks;
    masks.Reset(rows, words);
    std::vector<std::vector<uint64_t>> allowed(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      if (r == 3) continue;
      auto& m = allowed[static_cast<size_t>(r)];
      m.assign(static_cast<size_t>(r == 5 ? words / 2 : words), 0);
      for (int i = 0; i < static_cast<int>(m.size()) * 64 && i < vocab; ++i) {
        const bool ok = r == 4 ? i == vocab / 3 : (i * 7 + r) % 5 == 0;
        if (ok) m[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63);
      }
      masks.Set(r, m);
    }
    logits[static_cast<size_t>(4 * vocab + vocab / 3)] = -20.0f;
    logits[static_cast<size_t>(4 * vocab + 5)] = 90.0f;  // the raw maximum, not allowed
    DeviceVec<float> dl(logits);
    DeviceVec<int32_t> didx(masks.mask_index);
    DeviceVec<uint64_t> dmasks(masks.words);
    DeviceVec<int32_t> dt(static_cast<size_t>(rows));
    DeviceVec<float> dlp(static_cast<size_t>(rows));
    ASSERT_EQ(GreedySampleMasked(dl.get(), rows, vocab, didx.get(), dmasks.get(), words, dt.get(), dlp.get(), nullptr),
              0);
    ExpectSameAsTheCpuSampler(logits, rows, vocab, dt, dlp, &allowed);
    const std::vector<int32_t> tokens = dt.ToHost();
    EXPECT_EQ(tokens[4], vocab / 3);
    EXPECT_LT(tokens[5], words / 2 * 64);
  }
}

TEST_F(CudaLlamaKernels, CublasLinearMatchesADoubleReference) {
  std::mt19937 rng(13);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto gemm = std::move(CublasGemm::Create(stream)).value();
  for (GemmDtype dt : {GemmDtype::kFp32, GemmDtype::kBf16}) {
    // Rows 1-8 of bf16 take GemvBf16 (gemv_bf16.h; few long rows of W split over up to 8
    // warps: 4 x 8192 x 203), 9 and 33 cuBLAS.
    for (auto [rows, in, out] : {std::tuple{1, 192, 2048}, std::tuple{7, 2048, 512}, std::tuple{4, 8192, 203},
                                 std::tuple{8, 64, 37}, std::tuple{9, 256, 64}, std::tuple{33, 96, 200}}) {
      SCOPED_TRACE(testing::Message() << "bf16 " << (dt == GemmDtype::kBf16) << " " << rows << "x" << in << "x" << out);
      const int64_t x_stride = in + (dt == GemmDtype::kFp32 ? 3 : 0), y_stride = out + 4;
      std::vector<float> x = Normal(static_cast<size_t>(rows * x_stride), rng);
      std::vector<float> w = Normal(static_cast<size_t>(out) * in, rng, 0.05f);
      std::vector<float> y0 = Normal(static_cast<size_t>(rows * y_stride), rng);
      if (dt == GemmDtype::kBf16) {  // the reference sees exactly the bf16 operands
        for (auto& v : x) v = cpu::Bf16ToFloat(cpu::FloatToBf16(v));
        for (auto& v : w) v = cpu::Bf16ToFloat(cpu::FloatToBf16(v));
      }
      for (bool acc : {false, true}) {
        DeviceVec<float> dy(y0);
        if (dt == GemmDtype::kFp32) {
          DeviceVec<float> dx(x), dw(w);
          ASSERT_TRUE(gemm->Linear(dt, dx.get(), x_stride, dw.get(), dy.get(), y_stride, rows, in, out, acc).ok());
        } else {
          std::vector<uint16_t> xb(x.size()), wb(w.size());
          for (size_t i = 0; i < x.size(); ++i) xb[i] = cpu::FloatToBf16(x[i]);
          for (size_t i = 0; i < w.size(); ++i) wb[i] = cpu::FloatToBf16(w[i]);
          DeviceVec<uint16_t> dx(xb), dw(wb);
          ASSERT_TRUE(gemm->Linear(dt, dx.get(), x_stride, dw.get(), dy.get(), y_stride, rows, in, out, acc).ok());
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const std::vector<float> got = dy.ToHost(y0.size());
        double worst = 0.0;
        for (int r = 0; r < rows; ++r) {
          for (int o = 0; o < out; ++o) {
            double ref = acc ? y0[static_cast<size_t>(r * y_stride + o)] : 0.0;
            for (int k = 0; k < in; ++k) {
              ref += double(x[static_cast<size_t>(r * x_stride + k)]) * double(w[static_cast<size_t>(o) * in + k]);
            }
            worst = std::max(worst, std::fabs(ref - got[static_cast<size_t>(r * y_stride + o)]));
          }
          for (int o = out; o < y_stride; ++o) {  // padding untouched
            ASSERT_EQ(got[static_cast<size_t>(r * y_stride + o)], y0[static_cast<size_t>(r * y_stride + o)]);
          }
        }
        EXPECT_LT(worst, 1e-5 * std::sqrt(double(in)) + 1e-6) << "accumulate " << acc;
      }
    }
  }
  gemm.reset();
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvserve::kernels::cuda
