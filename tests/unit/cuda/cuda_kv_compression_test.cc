// Compression on the device (kernels/cuda/kv_compression.h through cuda::CudaKvAccess) against
// the CPU code on random KV in every dtype (and split K/V dtypes with int4), head_dim 64/128, block 16/32, GQA 1/4/8, random
// non-contiguous block tables. Tolerances, and why:
//   CompactKv             bit-exact: the whole pool after a round equals the CPU's in-place
//                         compaction byte for byte (K, V, scales), and the statistics match
//   TriAttentionScores    bit-exact raw scores: the same float64 operations in the same order,
//                         no FMA on either side
//   ScoreTriAttention     pooled scores within 1e-12 absolute of ZNormalize + MaxInto (z-scores
//                         are O(1); the mean and variance are tree-reduced on the device)
//   ScoreSnapKv           window scores within 1e-12 relative of the policy's host code (the
//                         softmax sums are tree-reduced; exp differs by at most an ulp)
// Needs a GPU (label gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../compression/compression_test_util.h"
#include "cache/host_kv_storage.h"
#include "compression/selection.h"
#include "compression/triattention_scorer.h"
#include "config/fields.h"
#include "cuda/cuda_kv_access.h"
#include "cuda/cuda_kv_storage.h"
#include "kernels/cpu/kv_compact.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/kv_compression.h"
#include "kernels/device_probe.h"

namespace kvserve::cuda {
namespace {

using config::KvDtype;

class CudaKvCompression : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  }
};

// K's and V's dtypes: every uniform dtype, then split pairs with int4 (per-channel keys,
// per-group values, group 16).
struct Precision {
  KvDtype k, v;
};
std::vector<Precision> AllPrecisions() {
  std::vector<Precision> out;
  for (KvDtype d : compression::testing::kAllDtypes) out.push_back({d, d});
  for (Precision p : {Precision{KvDtype::kInt4, KvDtype::kInt4}, Precision{KvDtype::kInt8, KvDtype::kInt4},
                      Precision{KvDtype::kInt4, KvDtype::kBf16}, Precision{KvDtype::kFp16, KvDtype::kInt8}}) {
    out.push_back(p);
  }
  return out;
}
std::string Name(Precision p) { return std::string(config::Name(p.k)) + "/" + std::string(config::Name(p.v)); }

cache::KvLayout Layout(Precision p, int head_dim, int block_size, int kv_heads) {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.block_size = block_size;
  return cache::WithPrecision(l, p.k, p.v, 16);
}

// A host pool with random K/V in every slot of `table` (len slots), and its device copy.
struct Pools {
  std::unique_ptr<cache::HostKvStorage> host;
  std::unique_ptr<CudaKvStorage> dev;
  std::vector<int32_t> table;
  int32_t blocks = 0;
};

Pools MakePools(const cache::KvLayout& l, int64_t len, std::mt19937& rng) {
  Pools p;
  const int32_t need = static_cast<int32_t>((len + l.block_size - 1) / l.block_size);
  p.blocks = need + 5;
  p.host = std::move(cache::HostKvStorage::Create(l, p.blocks)).value();
  p.dev = std::move(CudaKvStorage::Create(l, p.blocks)).value();
  std::vector<int32_t> ids(static_cast<size_t>(p.blocks) - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);  // non-contiguous
  p.table.assign(ids.begin(), ids.begin() + need);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(l.num_kv_heads * l.head_dim)), v(k.size());
  for (int layer = 0; layer < l.num_layers; ++layer) {
    for (int64_t i = 0; i < len; ++i) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      const int64_t slot = static_cast<int64_t>(p.table[static_cast<size_t>(i / l.block_size)]) * l.block_size +
                           i % l.block_size;
      cache::WriteKvToken(*p.host, layer, slot, k.data(), v.data());
    }
  }
  std::vector<cache::BlockCopy> all;
  for (int32_t b = 0; b < p.blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
  EXPECT_TRUE(p.dev->copy_blocks_from(*p.host, all).ok());
  EXPECT_TRUE(p.dev->synchronize().ok());
  return p;
}

std::vector<std::byte> PoolBytes(const cache::HostKvStorage& s) {
  const cache::KvLayout& l = s.layout();
  std::vector<std::byte> out;
  const size_t data_bytes = static_cast<size_t>(s.num_blocks()) * l.block_data_bytes();
  const size_t scale_floats = static_cast<size_t>(s.num_blocks()) * l.block_scales();
  for (int layer = 0; layer < l.num_layers; ++layer) {
    const std::byte* d = s.layer_data(layer);
    out.insert(out.end(), d, d + data_bytes);
    if (l.has_scales()) {
      const auto* sc = reinterpret_cast<const std::byte*>(s.layer_scales(layer));
      out.insert(out.end(), sc, sc + scale_floats * sizeof(float));
    }
  }
  return out;
}

TEST_F(CudaKvCompression, CompactionIsBitExactWithTheCpuKernel) {
  std::mt19937 rng(5);
  for (Precision dtype : AllPrecisions()) {
    for (int hd : {64, 128}) {
      for (int bs : {16, 32}) {
        SCOPED_TRACE(testing::Message() << Name(dtype) << " hd " << hd << " bs " << bs);
        const cache::KvLayout l = Layout(dtype, hd, bs, 2);
        // Pinned prefix, candidates, and a tail that shifts left; odd lengths.
        const int64_t len = 301, lo = 7, scored_end = 283, k = 101;
        Pools p = MakePools(l, len, rng);
        std::vector<int32_t> keep;
        const int64_t rows = static_cast<int64_t>(l.num_layers) * l.num_kv_heads;
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<int32_t> cand(static_cast<size_t>(scored_end - lo));
          std::iota(cand.begin(), cand.end(), static_cast<int32_t>(lo));
          // Row 0 keeps an identity prefix of 40 slots (those must not move), the rest random.
          const int64_t fixed = r == 0 ? 40 : 0;
          std::shuffle(cand.begin() + fixed, cand.end(), rng);
          cand.resize(static_cast<size_t>(k));
          std::sort(cand.begin(), cand.end());
          keep.insert(keep.end(), cand.begin(), cand.end());
        }
        const compression::KeepPlan plan{lo, scored_end, len, k, keep.data()};
        ASSERT_TRUE(kernels::cpu::ValidateKeepPlan(l, static_cast<int64_t>(p.table.size()), plan).ok());

        std::vector<std::byte*> data;
        std::vector<float*> scales;
        for (int layer = 0; layer < l.num_layers; ++layer) {
          data.push_back(p.host->layer_data(layer));
          scales.push_back(p.host->layer_scales(layer));
        }
        const compression::CompactStats want = kernels::cpu::CompactKv(
            l, data.data(), l.has_scales() ? scales.data() : nullptr, p.table.data(), plan, nullptr, 0);
        CudaKvAccess access(*p.dev);
        const compression::CompactStats got = access.Compact(p.table, plan);
        EXPECT_EQ(got.new_len, want.new_len);
        EXPECT_EQ(got.rows_moved, want.rows_moved);
        EXPECT_EQ(got.bytes_moved, want.bytes_moved);
        EXPECT_EQ(got.rows_recoded, want.rows_recoded);

        auto back = std::move(cache::HostKvStorage::Create(l, p.blocks)).value();
        std::vector<cache::BlockCopy> all;
        for (int32_t b = 0; b < p.blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
        ASSERT_TRUE(p.dev->copy_blocks_to(*back, all).ok());
        ASSERT_TRUE(p.dev->synchronize().ok());
        const std::vector<std::byte> a = PoolBytes(*p.host), b = PoolBytes(*back);
        ASSERT_EQ(a.size(), b.size());
        size_t first = 0;
        while (first < a.size() && a[first] == b[first]) ++first;
        EXPECT_EQ(first, a.size()) << "first differing byte of the pool after compaction";
      }
    }
  }
}

TEST_F(CudaKvCompression, TriAttentionScoresMatchTheCpuScorer) {
  std::mt19937 rng(9);
  for (Precision dtype : AllPrecisions()) {
    for (int hd : {64, 128}) {
      for (int group : {1, 4, 8}) {
        for (compression::TriOffsetPool pool : {compression::TriOffsetPool::kMean, compression::TriOffsetPool::kMax}) {
          SCOPED_TRACE(testing::Message() << Name(dtype) << " hd " << hd << " group " << group << " pool "
                                          << static_cast<int>(pool));
          const int kv_heads = 2;
          const cache::KvLayout l = Layout(dtype, hd, hd == 64 ? 16 : 32, kv_heads);
          const int64_t len = 517, lo = 11, end = 500;
          Pools p = MakePools(l, len, rng);
          const std::vector<float> inv_freq = compression::testing::InvFreq(hd);
          const compression::TriAttentionStats stats = compression::testing::RandomStats(
              l.num_layers, kv_heads * group, kv_heads, hd, inv_freq, rng, 1.25);
          compression::TriScorerOptions opts;
          opts.offset_pool = pool;
          compression::TriAttentionScorer scorer(stats, inv_freq, opts);
          scorer.Prepare(len + 1234);
          CudaKvAccess access(*p.dev);
          const int64_t n = end - lo;
          std::vector<float> keys(static_cast<size_t>(n * hd));
          std::vector<double> want(static_cast<size_t>(group * n)), pooled_want(static_cast<size_t>(n));
          std::vector<double> raw(want.size()), pooled(static_cast<size_t>(n));
          int32_t* d_table = nullptr;
          double *d_w = nullptr, *d_scores = nullptr;
          ASSERT_EQ(cudaMalloc(&d_table, p.table.size() * 4), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(d_table, p.table.data(), p.table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMalloc(&d_scores, want.size() * sizeof(double)), cudaSuccess);
          std::vector<double> per_head;  // [layer][kv][n]: ScoreTriAttention's rows
          std::vector<std::vector<double>> owned;  // every head's weights (w then c)
          std::vector<compression::TriKeyWeights> all_weights;
          for (int layer = 0; layer < l.num_layers; ++layer) {
            for (int kv = 0; kv < kv_heads; ++kv) {
              // CPU: the keys dequantized on the host, scored, normalised and pooled.
              access.ReadRows(p.table, layer, 0, kv, lo, end, keys.data());
              const compression::TriKeyWeights w = scorer.PrepareKvHead(layer, kv);
              scorer.ScoreKeys(keys.data(), n, want.data());
              // Raw device scores with the same weights: bit-exact.
              std::vector<double> wc(w.w.begin(), w.w.end());
              wc.insert(wc.end(), w.c.begin(), w.c.end());
              ASSERT_EQ(cudaMalloc(&d_w, wc.size() * sizeof(double)), cudaSuccess);
              ASSERT_EQ(cudaMemcpy(d_w, wc.data(), wc.size() * sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
              kernels::cuda::DeviceTriWeights dw;
              dw.group = w.group;
              dw.pools = w.pools;
              dw.trig = w.trig;
              dw.norm = w.norm;
              dw.w = d_w;
              dw.c = d_w + w.w.size();
              ASSERT_EQ(kernels::cuda::TriAttentionScores(l, p.dev->device_layer_data(layer),
                                                          p.dev->device_layer_scales(layer), d_table, kv, lo, end, dw,
                                                          d_scores, nullptr),
                        0);
              ASSERT_EQ(cudaMemcpy(raw.data(), d_scores, raw.size() * sizeof(double), cudaMemcpyDeviceToHost),
                        cudaSuccess);
              cudaFree(d_w);
              for (size_t i = 0; i < raw.size(); ++i) {
                ASSERT_EQ(raw[i], want[i]) << "raw score " << i << " of layer " << layer << " kv " << kv;
              }
              std::fill(pooled_want.begin(), pooled_want.end(), -std::numeric_limits<double>::infinity());
              for (int g = 0; g < group; ++g) {
                std::span<double> row(want.data() + static_cast<int64_t>(g) * n, static_cast<size_t>(n));
                compression::ZNormalize(row);
                compression::MaxInto(row, pooled_want);
              }
              // Through the access (what the policy calls): pooled scores only.
              ASSERT_TRUE(access.ScoreTriAttention(p.table, layer, kv, lo, end, w, pooled));
              for (int64_t j = 0; j < n; ++j) {
                ASSERT_NEAR(pooled[static_cast<size_t>(j)], pooled_want[static_cast<size_t>(j)], 1e-12) << "slot " << j;
              }
              per_head.insert(per_head.end(), pooled.begin(), pooled.end());
              owned.emplace_back(w.w.begin(), w.w.end());
              owned.back().insert(owned.back().end(), w.c.begin(), w.c.end());
              all_weights.push_back(w);
            }
          }
          // Batched (one synchronisation per round): every head's row equals ScoreTriAttention's.
          for (size_t i = 0; i < all_weights.size(); ++i) {
            all_weights[i].w = std::span<const double>(owned[i].data(), all_weights[i].w.size());
            all_weights[i].c = std::span<const double>(owned[i].data() + all_weights[i].w.size(), all_weights[i].c.size());
          }
          std::vector<double> batched(per_head.size(), -1.0);
          ASSERT_TRUE(access.ScoresTriAttentionBatched());
          ASSERT_TRUE(access.ScoreTriAttentionAll(p.table, lo, end, all_weights, batched));
          for (size_t i = 0; i < batched.size(); ++i) ASSERT_EQ(batched[i], per_head[i]) << "batched score " << i;
          cudaFree(d_table);
          cudaFree(d_scores);
        }
      }
    }
  }
}

// SnapKV's window scores as compression::SnapKvPolicy computes them on the host (the
// reference): float64 logits, softmax per window row over the slots it saw, probabilities
// summed over rows for slots before the window, average-pooled, group mean; +inf in the window.
std::vector<double> SnapReference(const std::vector<float>& keys, int hd, const compression::SnapKvWindow& w, int64_t lo,
                                  int64_t n) {
  std::vector<double> row(static_cast<size_t>(n - lo), 0.0), attn(static_cast<size_t>(w.prefix_end)),
      logits(static_cast<size_t>(n));
  for (int g = 0; g < w.group; ++g) {
    std::fill(attn.begin(), attn.end(), 0.0);
    for (int r = 0; r < w.num_queries; ++r) {
      const float* q = w.queries + static_cast<int64_t>(r) * w.q_stride + static_cast<int64_t>(g) * hd;
      const int64_t seen = w.seen[static_cast<size_t>(r)];
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0.0;
        for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * keys[static_cast<size_t>(j * hd + i)];
        logits[static_cast<size_t>(j)] = dot * w.scale;
        mx = std::max(mx, logits[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < seen; ++j) sum += std::exp(logits[static_cast<size_t>(j)] - mx);
      for (int64_t j = 0; j < std::min(seen, w.prefix_end); ++j) {
        attn[static_cast<size_t>(j)] += std::exp(logits[static_cast<size_t>(j)] - mx) / sum;
      }
    }
    const int half = w.pool_kernel / 2;
    for (int64_t j = lo; j < w.prefix_end; ++j) {
      double acc = 0.0;
      for (int64_t o = std::max<int64_t>(0, j - half); o <= std::min(w.prefix_end - 1, j + half); ++o) {
        acc += attn[static_cast<size_t>(o)];
      }
      row[static_cast<size_t>(j - lo)] += acc / w.pool_kernel / w.group;
    }
  }
  for (int64_t j = std::max(lo, w.prefix_end); j < n; ++j) row[static_cast<size_t>(j - lo)] = std::numeric_limits<double>::infinity();
  return row;
}

TEST_F(CudaKvCompression, SnapKvWindowScoresMatchTheCpuPolicy) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Precision dtype : AllPrecisions()) {
    for (int hd : {64, 128}) {
      for (int group : {1, 4, 8}) {
        SCOPED_TRACE(testing::Message() << Name(dtype) << " hd " << hd << " group " << group);
        const int kv_heads = 2;
        const cache::KvLayout l = Layout(dtype, hd, hd == 64 ? 16 : 32, kv_heads);
        const int64_t n = 389, lo = 5, w = 16;
        Pools p = MakePools(l, n, rng);
        const int q_size = kv_heads * group * hd;
        std::vector<float> queries(static_cast<size_t>(w * q_size));
        for (float& x : queries) x = nd(rng);
        std::vector<int64_t> seen(static_cast<size_t>(w));
        for (int64_t r = 0; r < w; ++r) seen[static_cast<size_t>(r)] = n - w + r + 1;
        seen[0] = n / 2;  // a row that saw only a prefix (after compaction, positions skip)
        CudaKvAccess access(*p.dev);
        std::vector<float> keys(static_cast<size_t>(n * hd));
        std::vector<double> got(static_cast<size_t>(n - lo));
        for (int layer = 0; layer < l.num_layers; ++layer) {
          std::vector<compression::SnapKvWindow> layer_windows;
          std::vector<double> per_head;
          for (int kv = 0; kv < kv_heads; ++kv) {
            compression::SnapKvWindow win;
            win.group = group;
            win.num_queries = static_cast<int>(w);
            win.queries = queries.data() + static_cast<int64_t>(kv) * group * hd;
            win.q_stride = q_size;
            win.seen = seen;
            win.prefix_end = n - w;
            win.pool_kernel = 5;
            win.scale = 1.0 / std::sqrt(static_cast<double>(hd));
            access.ReadRows(p.table, layer, 0, kv, 0, n, keys.data());
            const std::vector<double> want = SnapReference(keys, hd, win, lo, n);
            ASSERT_TRUE(access.ScoreSnapKv(p.table, layer, kv, lo, n, win, got));
            layer_windows.push_back(win);
            per_head.insert(per_head.end(), got.begin(), got.end());
            for (int64_t j = 0; j < n - lo; ++j) {
              const double a = want[static_cast<size_t>(j)], b = got[static_cast<size_t>(j)];
              if (std::isinf(a)) {
                ASSERT_EQ(a, b) << "slot " << lo + j;
              } else {
                ASSERT_NEAR(b, a, 1e-12 * (1.0 + std::fabs(a))) << "slot " << lo + j;
              }
            }
          }
          // The layer batched (one synchronisation): every head's row equals ScoreSnapKv's.
          std::vector<double> batched(per_head.size(), -1.0);
          ASSERT_TRUE(access.ScoresSnapKvBatched());
          ASSERT_TRUE(access.ScoreSnapKvLayer(p.table, layer, lo, n, layer_windows, batched));
          for (size_t i = 0; i < batched.size(); ++i) ASSERT_EQ(batched[i], per_head[i]) << "batched score " << i;
        }
      }
    }
  }
}

// CudaKvAccess::ReadRows brings rows back exactly as the CPU reads them (every precision,
// ranges that start and end inside blocks), e.g. for SnapKV's host fallback and calibration.
TEST_F(CudaKvCompression, ReadRowsDecodesLikeTheCpu) {
  std::mt19937 rng(17);
  for (Precision pr : AllPrecisions()) {
    for (int hd : {48, 128}) {
      SCOPED_TRACE(testing::Message() << Name(pr) << " hd " << hd);
      const cache::KvLayout l = Layout(pr, hd, 16, 2);
      const int64_t len = 77;
      Pools p = MakePools(l, len, rng);
      CudaKvAccess access(*p.dev);
      for (int kv = 0; kv < 2; ++kv) {
        const int64_t begin = 5, end = 70;
        std::vector<float> want(static_cast<size_t>((end - begin) * hd)), got(want.size());
        for (int64_t i = begin; i < end; ++i) {
          const int64_t block = p.table[static_cast<size_t>(i / l.block_size)];
          kernels::cpu::ReadKvRow(l, p.host->layer_data(1), p.host->layer_scales(1), block, kv, 1,
                                  static_cast<int>(i % l.block_size), want.data() + (i - begin) * hd);
        }
        access.ReadRows(p.table, 1, kv, 1, begin, end, got.data());
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "side " << kv;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::cuda
