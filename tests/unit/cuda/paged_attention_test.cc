// The CUDA paged attention against its CPU twin on random inputs: head_dim 48/64/128/256, block
// 16/32, GQA 1/4/8, every KV dtype (and split K/V dtypes with int4), random non-contiguous block tables, mixed prefill chunks
// (also chunked prefill: a chunk attending to earlier KV) and decode rows with odd lengths,
// several split sizes; every row through the split-KV kernel, and decode rows split-KV with
// prefill rows through the tiled kernel (the model's tile size and a 3-row tile); sliding
// windows, soft-caps and sinks against the CPU's AttentionVariant. Tolerance: both sides dequantize the
// same codes exactly and accumulate in fp32; only the summation order differs, so outputs agree
// to ~1e-5 relative. AttentionMass (H2O) is compared the same way, to 1e-4 relative. Needs a
// GPU (label gpu).
#include "kernels/cuda/paged_attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "cache/host_kv_storage.h"
#include "config/fields.h"
#include "cuda/cuda_kv_storage.h"
#include "cuda/device_array.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/device_probe.h"
#include "model/device_plan.h"

namespace kvserve::kernels::cuda {
namespace {

using config::KvDtype;

struct Case {
  KvDtype dtype;
  int head_dim, block_size, kv_heads, group, split;
  // V's dtype and the int4 value group when K and V differ or int4 is involved.
  std::optional<KvDtype> v_dtype = std::nullopt;
  int int4_group = 32;
  // The variant (kernels::cpu::AttentionVariant): window, soft-cap, sinks (random logits).
  int window = 0;
  float softcap = 0.0f;
  bool sinks = false;
};

void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "dtype " << config::Name(c.dtype) << "/"
                                  << config::Name(c.v_dtype.value_or(c.dtype)) << " g" << c.int4_group << " hd " << c.head_dim << " bs "
                                  << c.block_size << " kvh " << c.kv_heads << " group " << c.group << " split "
                                  << c.split << " window " << c.window << " softcap " << c.softcap << " sinks "
                                  << c.sinks);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cache::KvLayout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = c.kv_heads;
  layout.head_dim = c.head_dim;
  layout.block_size = c.block_size;
  layout = cache::WithPrecision(layout, c.dtype, c.v_dtype.value_or(c.dtype), c.int4_group);
  const int num_heads = c.kv_heads * c.group;

  // Sequences: (rows this step, kv_len after the step): decode rows, prefill chunks, odd sizes.
  // {40, 190} and {33, 97}: chunked prefill (the chunk attends to the earlier KV, then causally).
  const std::vector<std::pair<int, int>> shape = {{1, 1},  {1, 37},   {5, 5},   {3, 70},
                                                  {1, 301}, {7, 133}, {40, 190}, {33, 97}, {64, 64}};
  int32_t total_blocks = 1;
  for (auto [n, kv] : shape) total_blocks += (kv + c.block_size - 1) / c.block_size;
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);  // non-contiguous tables

  auto host = std::move(cache::HostKvStorage::Create(layout, total_blocks)).value();
  std::vector<int32_t> seq_starts{0}, kv_lens, offsets{0}, tables;
  size_t next = 0;
  int max_kv = 0;
  for (size_t s = 0; s < shape.size(); ++s) {
    auto [n, kv] = shape[s];
    const int nb = (kv + c.block_size - 1) / c.block_size;
    for (int b = 0; b < nb; ++b) tables.push_back(ids[next++]);
    offsets.push_back(static_cast<int32_t>(tables.size()));
    seq_starts.push_back(seq_starts.back() + n);
    kv_lens.push_back(kv);
    max_kv = std::max(max_kv, kv);
    std::vector<float> k(static_cast<size_t>(c.kv_heads * c.head_dim)), v(k.size());
    for (int i = 0; i < kv; ++i) {
      for (auto& x : k) x = normal(rng);
      for (auto& x : v) x = normal(rng);
      const int64_t slot = static_cast<int64_t>(tables[offsets[s] + i / c.block_size]) * c.block_size + i % c.block_size;
      cache::WriteKvToken(*host, 0, slot, k.data(), v.data());
    }
  }
  const int rows = seq_starts.back();
  const int64_t q_stride = static_cast<int64_t>(num_heads) * c.head_dim + 8;  // padded rows
  std::vector<float> q(static_cast<size_t>(rows * q_stride));
  for (auto& x : q) x = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> sinks(static_cast<size_t>(num_heads));
  for (auto& x : sinks) x = 2.0f * normal(rng);
  const kvserve::cuda::DeviceArray<float> sinks_dev(sinks);
  ASSERT_TRUE(sinks_dev.ok());
  const kernels::cpu::AttentionVariant cpu_variant{c.window, c.softcap, c.sinks ? sinks.data() : nullptr};
  const DeviceAttentionVariant dev_variant{c.window, c.softcap, c.sinks ? sinks_dev.get() : nullptr};

  // CPU reference.
  const int64_t out_stride = static_cast<int64_t>(num_heads) * c.head_dim;
  std::vector<float> ref(static_cast<size_t>(rows * out_stride)), ref_lse(static_cast<size_t>(rows * num_heads));
  kernels::cpu::PagedSeqs cs;
  cs.num_seqs = static_cast<int>(shape.size());
  cs.seq_starts = seq_starts.data();
  cs.kv_lens = kv_lens.data();
  cs.block_table_offsets = offsets.data();
  cs.block_tables = tables.data();
  std::vector<float> work(kernels::cpu::PagedAttentionWorkspaceFloats(layout, num_heads, 64));
  const kernels::cpu::KvTierView tier{layout, host->layer_data(0), host->layer_scales(0)};
  const std::span<const kernels::cpu::KvTierView> tiers(&tier, 1);
  kernels::cpu::PagedAttentionTiered(tiers, cs, q.data(), q_stride, num_heads, scale, ref.data(), out_stride,
                                     ref_lse.data(), work.data(), work.size(), cpu_variant);

  // Device.
  auto dev = std::move(kvserve::cuda::CudaKvStorage::Create(layout, total_blocks)).value();
  std::vector<cache::BlockCopy> all;
  for (int32_t b = 0; b < total_blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
  ASSERT_TRUE(dev->copy_blocks_from(*host, all).ok());
  ASSERT_TRUE(dev->synchronize().ok());
  const kvserve::cuda::UploadedPagedSeqs uploaded(seq_starts, kv_lens, offsets, tables);
  ASSERT_TRUE(uploaded.ok());
  const DevicePagedSeqs& ds = uploaded.view();
  ASSERT_EQ(ds.num_rows, rows);
  ASSERT_EQ(ds.max_kv_len, max_kv);
  const kvserve::cuda::DeviceArray<float> q_dev(q), out_dev(ref.size()), lse_dev(ref_lse.size());
  ASSERT_TRUE(q_dev.ok() && out_dev.ok() && lse_dev.ok());
  const float* dq = q_dev.get();
  float* dout = out_dev.get();
  float* dlse = lse_dev.get();
  // Every row through the split-KV kernel, then decode rows split-KV and prefill rows tiled
  // (the model's tile size, and 3 rows so that tiles end inside chunks).
  std::vector<kvserve::cuda::DeviceArray<int32_t>> routing;
  std::vector<float> got(ref.size()), got_lse(ref_lse.size());
  for (int tile_rows : {0, model::PrefillTileRows(c.head_dim, c.group, kMaxPrefillTileFloats), 3}) {
    SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows);
    DevicePagedSeqs dr = ds;
    if (tile_rows > 0) {
      const model::AttentionRowCounts counts = model::CountAttentionRows(seq_starts, tile_rows);
      std::vector<int32_t> split_rows(static_cast<size_t>(counts.split_rows)),
          tiles(2 * static_cast<size_t>(counts.tiles));
      model::PlanAttentionRows(seq_starts, tile_rows, split_rows, tiles);
      dr.num_split_rows = counts.split_rows;
      dr.split_rows = routing.emplace_back(split_rows).get();
      dr.num_tiles = counts.tiles;
      dr.tile_rows = tile_rows;
      dr.tiles = routing.emplace_back(tiles).get();
    }
    const size_t ws_bytes = PagedAttentionWorkspaceBytes(layout, num_heads, dr, c.split);
    const kvserve::cuda::DeviceArray<std::byte> ws_dev(ws_bytes);
    ASSERT_TRUE(ws_dev.ok());
    void* ws = ws_dev.get();
    ASSERT_EQ(cudaMemset(dout, 0xff, ref.size() * sizeof(float)), cudaSuccess);  // NaN: every row must be written
    ASSERT_EQ(PagedAttention(layout, dev->device_layer_data(0), dev->device_layer_scales(0), dr, dq, q_stride,
                             num_heads, scale, dout, out_stride, dlse, ws, ws_bytes, c.split, dev->stream(),
                             dev_variant),
              0);
    ASSERT_TRUE(dev->synchronize().ok());
    ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_lse.data(), dlse, got_lse.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "output " << i << " not written";
      worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])));
    }
    EXPECT_LT(worst, 2e-5 * std::sqrt(double(max_kv))) << "max |cuda - cpu| of the outputs";
    for (size_t i = 0; i < ref_lse.size(); ++i) EXPECT_NEAR(got_lse[i], ref_lse[i], 1e-4) << "lse " << i;
  }

  // Attention mass (H2O) from each side's own lse: the CPU's polynomial exp is within 3e-7.
  const int64_t mass_stride = max_kv + 3;
  const size_t mass_n = shape.size() * static_cast<size_t>(c.kv_heads) * static_cast<size_t>(mass_stride);
  std::vector<float> ref_mass(mass_n, 0.0f);
  kernels::cpu::AttentionMassTiered(tiers, cs, q.data(), q_stride, num_heads, scale, ref_lse.data(), ref_mass.data(),
                                    mass_stride, work.data(), work.size(), cpu_variant);
  const kvserve::cuda::DeviceArray<float> mass_dev(mass_n);  // zeroed
  ASSERT_TRUE(mass_dev.ok());
  float* dmass = mass_dev.get();
  ASSERT_EQ(AttentionMass(layout, dev->device_layer_data(0), dev->device_layer_scales(0), ds, dq, q_stride, num_heads,
                          scale, dlse, dmass, mass_stride, dev->stream(), dev_variant),
            0);
  ASSERT_TRUE(dev->synchronize().ok());
  std::vector<float> got_mass(mass_n);
  ASSERT_EQ(cudaMemcpy(got_mass.data(), dmass, mass_n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < mass_n; ++i) {
    ASSERT_NEAR(got_mass[i], ref_mass[i], 1e-4 * (1.0 + std::fabs(ref_mass[i]))) << "mass " << i;
  }
}

TEST(CudaPagedAttention, MatchesTheCpuKernel) {
  const DeviceProbe probe = ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  uint32_t seed = 1;
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    for (int hd : {48, 64, 128, 256}) {
      for (int bs : {16, 32}) {
        for (int group : {1, 2, 4, 8}) {
          for (int split : {32, 512}) RunCase({d, hd, bs, 2, group, split}, seed++);
        }
      }
    }
  }
}

// Split K/V dtypes and int4 (per-channel keys, per-group values): the CPU writes the pool
// (int4 keys a row at a time, so channel ranges widen as in decode), both sides decode the
// same codes exactly, and only the summation order differs.
TEST(CudaPagedAttention, MatchesTheCpuKernelForSplitAndInt4Precisions) {
  const DeviceProbe probe = ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  const std::pair<KvDtype, KvDtype> pairs[] = {
      {KvDtype::kInt4, KvDtype::kInt4}, {KvDtype::kInt8, KvDtype::kInt4}, {KvDtype::kInt4, KvDtype::kInt8},
      {KvDtype::kBf16, KvDtype::kInt4}, {KvDtype::kFp16, KvDtype::kInt8}, {KvDtype::kInt4, KvDtype::kFp8E4M3},
      {KvDtype::kFp32, KvDtype::kBf16}};
  uint32_t seed = 1000;
  for (auto [k, v] : pairs) {
    for (int hd : {48, 64, 128}) {
      for (int bs : {16, 32}) {
        for (int group : {1, 4, 8}) {
          const int int4_group = hd == 48 ? 32 : 16;  // 48 = 32 + 16: a short last group
          RunCase({k, hd, bs, 2, group, 64, v, int4_group}, seed++);
        }
      }
    }
  }
}

// Sliding windows (shorter and longer than chunks, splits and tiles), Gemma 2's soft-cap and
// gpt-oss's sinks, alone and together, through the vectorised, general and tiled kernels.
TEST(CudaPagedAttention, MatchesTheCpuKernelForWindowsSoftcapsAndSinks) {
  const DeviceProbe probe = ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  uint32_t seed = 2000;
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kBf16, KvDtype::kInt8}) {
    for (int hd : {48, 128}) {
      for (int group : {1, 4}) {
        for (int window : {1, 7, 40, 128}) {
          RunCase({d, hd, 16, 2, group, 32, std::nullopt, 32, window}, seed++);
        }
        RunCase({d, hd, 16, 2, group, 64, std::nullopt, 32, 0, 30.0f}, seed++);
        RunCase({d, hd, 32, 2, group, 512, std::nullopt, 32, 0, 0.0f, true}, seed++);
        RunCase({d, hd, 16, 2, group, 32, std::nullopt, 32, 24, 50.0f, true}, seed++);
      }
    }
  }
}

TEST(CudaPagedAttention, RejectsShapesOutsideItsLimits) {
  cache::KvLayout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 2;
  layout.head_dim = 512;  // > kMaxAttentionHeadDim
  DevicePagedSeqs ds;
  ds.num_rows = 1;
  ds.max_kv_len = 1;
  EXPECT_EQ(PagedAttention(layout, nullptr, nullptr, ds, nullptr, 0, 4, 1.0f, nullptr, 0, nullptr, nullptr, 1 << 30,
                           16, nullptr),
            static_cast<int>(cudaErrorInvalidValue));
  layout.head_dim = 64;
  EXPECT_EQ(PagedAttention(layout, nullptr, nullptr, ds, nullptr, 0, 32, 1.0f, nullptr, 0, nullptr, nullptr, 1 << 30,
                           16, nullptr),
            static_cast<int>(cudaErrorInvalidValue));  // group 16 > 8
  // A prefill tile whose queries exceed the kernel's shared-memory budget.
  layout.head_dim = 128;
  const int32_t tile[2] = {0, 1};
  ds.tiles = tile;
  ds.num_tiles = 1;
  ds.tile_rows = kMaxPrefillTileFloats / (128 * 4) + 1;
  EXPECT_EQ(PagedAttention(layout, nullptr, nullptr, ds, nullptr, 0, 8, 1.0f, nullptr, 0, nullptr, nullptr, 1 << 30,
                           16, nullptr),
            static_cast<int>(cudaErrorInvalidValue));
}

// Which layouts the vectorised split-KV kernel takes (the model then routes prefill rows to it);
// MatchesTheCpuKernel runs both kinds against the CPU.
TEST(CudaPagedAttention, TheVectorisedKernelCoversTheCommonShapesOnly) {
  cache::KvLayout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  layout.block_size = 16;
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    const cache::KvLayout l = cache::WithPrecision(layout, d, d, 32);
    for (int group : {1, 2, 4, 8}) EXPECT_TRUE(VecSplitCovers(l, 8 * group)) << config::Name(d) << " group " << group;
    EXPECT_FALSE(VecSplitCovers(l, 8 * 3)) << "group 3";
    EXPECT_FALSE(VecSplitCovers(l, 12)) << "heads not a multiple of KV heads";
  }
  EXPECT_FALSE(VecSplitCovers(cache::WithPrecision(layout, KvDtype::kInt4, KvDtype::kInt4, 32), 32));
  EXPECT_FALSE(VecSplitCovers(cache::WithPrecision(layout, KvDtype::kBf16, KvDtype::kInt8, 32), 32));
  cache::KvLayout odd = cache::WithPrecision(layout, KvDtype::kBf16, KvDtype::kBf16, 32);
  odd.head_dim = 96;
  EXPECT_FALSE(VecSplitCovers(odd, 32));
  odd.head_dim = 128;
  odd.block_size = 24;
  EXPECT_FALSE(VecSplitCovers(odd, 32)) << "block size not a power of two";
}

}  // namespace
}  // namespace kvserve::kernels::cuda
