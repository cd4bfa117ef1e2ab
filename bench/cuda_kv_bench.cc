// CUDA KV storage figures (prints; no targets asserted): the device's measured copy bandwidth,
// the reference that the decode-attention aim is stated against (issue 13: attention at >= 85%
// of it), and swap bandwidth through CudaKvStorage to pinned and to pageable host tiers, on the
// KV layout of a 1B-class Llama (16 layers, 8 KV heads, head_dim 128, block 16, bf16).
//
// Also: prefill attention over paged KV, every row through the split-KV kernel against prefill
// rows through the tiled kernel (chunked prefill shapes), and one TriAttention compression
// round on the device (scoring + pooling, compaction gather).
//
// Usage: cuda_kv_bench [--blocks N]     Needs a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/host_kv_storage.h"
#include "cuda/cuda_kv_access.h"
#include "cuda/cuda_kv_storage.h"
#include "cuda/device_array.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/device_probe.h"
#include "model/device_plan.h"

namespace {

using kvserve::cache::BlockCopy;
using kvserve::cache::BlockId;

using kvserve::bench::DeviceCopyGbps;
using kvserve::bench::Median;

// Swap-out then swap-in of `blocks` blocks through the storage API; GB/s per direction.
void SwapGbps(kvserve::cuda::CudaKvStorage& dev, kvserve::cache::KvStorage& tier, int32_t blocks, double& out_gbps,
              double& in_gbps) {
  std::vector<BlockCopy> out, in;
  for (int32_t i = 0; i < blocks; ++i) {
    out.push_back({BlockId{i + 1}, BlockId{i}});
    in.push_back({BlockId{i}, BlockId{blocks + 1 + i}});
  }
  const double bytes = static_cast<double>(blocks) * static_cast<double>(dev.layout().bytes_per_block());
  std::vector<double> o, n;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    if (!dev.copy_blocks_to(tier, out).ok() || !dev.synchronize().ok()) return;
    auto t1 = std::chrono::steady_clock::now();
    if (!dev.copy_blocks_from(tier, in).ok() || !dev.synchronize().ok()) return;
    auto t2 = std::chrono::steady_clock::now();
    if (rep == 0) continue;  // warm-up
    o.push_back(bytes / std::chrono::duration<double>(t1 - t0).count() / 1e9);
    n.push_back(bytes / std::chrono::duration<double>(t2 - t1).count() / 1e9);
  }
  out_gbps = Median(o);
  in_gbps = Median(n);
}

// The attention benchmarks' shape: bf16 KV, 8 KV heads x head_dim 128, 32 query heads (GQA 4),
// block 16. `seqs` sequences of `rows` query rows each over `context` slots (after the
// step's writes) on scattered blocks, as in a busy pool.
struct AttentionRig {
  static constexpr int kHeads = 32;
  kvserve::cache::KvLayout layout;
  std::unique_ptr<kvserve::cuda::CudaKvStorage> dev;
  std::vector<int32_t> starts, lens, offsets, ids;
  std::unique_ptr<kvserve::cuda::UploadedPagedSeqs> uploaded;
  std::unique_ptr<kvserve::cuda::DeviceArray<float>> q, out;

  bool Init(int seqs, int rows, int context, uint32_t seed) {
    layout.num_layers = 1;
    layout.num_kv_heads = 8;
    layout.head_dim = 128;
    layout.block_size = 16;
    layout.dtype = kvserve::config::KvDtype::kBf16;
    const int per_seq = context / layout.block_size;
    auto d = kvserve::cuda::CudaKvStorage::Create(layout, seqs * per_seq + 1);
    if (!d.ok()) return false;
    dev = std::move(*d);
    ids.resize(static_cast<size_t>(seqs * per_seq));
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    starts.resize(static_cast<size_t>(seqs) + 1);
    offsets.resize(static_cast<size_t>(seqs) + 1);
    lens.assign(static_cast<size_t>(seqs), context);
    for (int s = 0; s <= seqs; ++s) {
      starts[static_cast<size_t>(s)] = s * rows;
      offsets[static_cast<size_t>(s)] = s * per_seq;
    }
    uploaded = std::make_unique<kvserve::cuda::UploadedPagedSeqs>(starts, lens, offsets, ids);
    const std::vector<float> host_q(static_cast<size_t>(seqs) * rows * kHeads * layout.head_dim, 0.01f);
    q = std::make_unique<kvserve::cuda::DeviceArray<float>>(host_q);
    out = std::make_unique<kvserve::cuda::DeviceArray<float>>(host_q.size());
    return uploaded->ok() && q->ok() && out->ok();
  }

  // Median ms of 9 timed PagedAttention calls (after one warm-up) over `seqs`; 0 on an error.
  double TimeMs(const kvserve::kernels::cuda::DevicePagedSeqs& seqs, int split) {
    const size_t ws_bytes = kvserve::kernels::cuda::PagedAttentionWorkspaceBytes(layout, kHeads, seqs, split);
    const kvserve::cuda::DeviceArray<std::byte> ws(ws_bytes);
    if (!ws.ok()) return 0.0;
    auto stream = static_cast<cudaStream_t>(dev->stream());
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<double> ms;
    for (int i = 0; i < 10; ++i) {
      cudaEventRecord(start, stream);
      const int err = kvserve::kernels::cuda::PagedAttention(layout, dev->device_layer_data(0), nullptr, seqs, q->get(),
                                                             kHeads * layout.head_dim, kHeads, 0.088f, out->get(),
                                                             kHeads * layout.head_dim, nullptr, ws.get(), ws_bytes,
                                                             split, stream);
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      if (err != 0) return 0.0;
      float t = 0.0f;
      cudaEventElapsedTime(&t, start, stop);
      if (i > 0) ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return Median(ms);
  }
};

// Decode attention: `batch` sequences of `context` tokens, one query row each; KV bytes read
// per second.
double DecodeAttentionGbps(int batch, int context, int split, double& ms_out) {
  AttentionRig rig;
  if (!rig.Init(batch, 1, context, 7)) return 0.0;
  ms_out = rig.TimeMs(rig.uploaded->view(), split);
  if (ms_out <= 0.0) return 0.0;
  const double kv_bytes =
      2.0 * batch * static_cast<double>(context) * rig.layout.num_kv_heads * rig.layout.head_dim * 2.0;
  return kv_bytes / (ms_out * 1e-3) / 1e9;
}

// Prefill attention: `seqs` sequences each running a chunk of `chunk` query rows whose KV
// (after the chunk's writes) is `context` slots (chunked prefill: the chunk attends to the
// earlier context, then causally). tiled: prefill rows through the tiled kernel (the model's
// path); otherwise every row through the split-KV kernel (the path before the tiled kernel).
double PrefillAttentionMs(int seqs, int chunk, int context, bool tiled) {
  AttentionRig rig;
  if (!rig.Init(seqs, chunk, context, 9)) return 0.0;
  kvserve::kernels::cuda::DevicePagedSeqs ds = rig.uploaded->view();
  const int tile_rows = kvserve::model::PrefillTileRows(rig.layout.head_dim, AttentionRig::kHeads / rig.layout.num_kv_heads,
                                                        kvserve::kernels::cuda::kMaxPrefillTileFloats);
  const kvserve::model::AttentionRowCounts counts = kvserve::model::CountAttentionRows(rig.starts, tile_rows);
  std::vector<int32_t> split_rows(static_cast<size_t>(counts.split_rows)), tiles(2 * static_cast<size_t>(counts.tiles));
  kvserve::model::PlanAttentionRows(rig.starts, tile_rows, split_rows, tiles);
  const kvserve::cuda::DeviceArray<int32_t> split_dev(split_rows), tiles_dev(tiles);
  if (!split_dev.ok() || !tiles_dev.ok()) return 0.0;
  if (tiled) {
    ds.num_split_rows = counts.split_rows;
    ds.split_rows = split_dev.get();
    ds.num_tiles = counts.tiles;
    ds.tile_rows = tile_rows;
    ds.tiles = tiles_dev.get();
  }
  return rig.TimeMs(ds, 512);
}

// One TriAttention compression round of one sequence on the device (CudaKvAccess): scoring,
// z-normalisation and GQA max for every (layer, KV head) with the pooled scores back on the
// host, per head (one synchronisation each) and batched (ScoreTriAttentionAll: one per round),
// then the compaction gather keeping `keep` of `context` slots; bf16 KV of the 1B-class shape
// (16 layers, 8 KV heads x 128, GQA 4). Median ms of each part over 5 rounds.
void CompressionRoundMs(int context, int keep, double& score_ms, double& batched_ms, double& compact_ms) {
  kvserve::cache::KvLayout l;
  l.num_layers = 16;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.block_size = 16;
  l.dtype = kvserve::config::KvDtype::kBf16;
  const int group = 4, blocks = context / l.block_size;
  auto dev = kvserve::cuda::CudaKvStorage::Create(l, blocks + 1);
  if (!dev.ok()) return;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 1);
  std::shuffle(table.begin(), table.end(), std::mt19937(3));
  std::vector<double> w(static_cast<size_t>(group) * l.head_dim, 0.01), c(static_cast<size_t>(group) * l.head_dim / 2,
                                                                          0.02);
  kvserve::compression::TriKeyWeights weights;
  weights.group = group;
  weights.w = w;
  weights.c = c;
  std::vector<double> pooled(static_cast<size_t>(context));
  const int64_t lo = 4, scored_end = context - 64;
  std::vector<int32_t> keep_rows;
  for (int r = 0; r < l.num_layers * l.num_kv_heads; ++r) {
    for (int i = 0; i < keep; ++i) {
      keep_rows.push_back(static_cast<int32_t>(lo + static_cast<int64_t>(i) * (scored_end - lo) / keep));
    }
  }
  const std::vector<kvserve::compression::TriKeyWeights> all_weights(
      static_cast<size_t>(l.num_layers) * static_cast<size_t>(l.num_kv_heads), weights);
  std::vector<double> all_pooled(all_weights.size() * static_cast<size_t>(scored_end - lo));
  kvserve::cuda::CudaKvAccess access(**dev);
  std::vector<double> s_ms, b_ms, c_ms;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int layer = 0; layer < l.num_layers; ++layer) {
      for (int kv = 0; kv < l.num_kv_heads; ++kv) access.ScoreTriAttention(table, layer, kv, lo, scored_end, weights, pooled);
    }
    const auto t1 = std::chrono::steady_clock::now();
    access.ScoreTriAttentionAll(table, lo, scored_end, all_weights, all_pooled);
    const auto t2 = std::chrono::steady_clock::now();
    const kvserve::compression::KeepPlan plan{lo, scored_end, context, keep, keep_rows.data()};
    access.Compact(table, plan);
    const auto t3 = std::chrono::steady_clock::now();
    if (rep == 0) continue;
    s_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    b_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    c_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
  }
  score_ms = Median(s_ms);
  batched_ms = Median(b_ms);
  compact_ms = Median(c_ms);
}

}  // namespace

int main(int argc, char** argv) {
  int32_t blocks = 256;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--blocks") == 0) blocks = std::atoi(argv[i + 1]);
  }
  const kvserve::kernels::DeviceProbe probe = kvserve::kernels::ProbeCudaDevice();
  if (!probe.usable()) {
    std::fprintf(stderr, "cuda_kv_bench: no usable CUDA device: %s\n", probe.reason.c_str());
    return 1;
  }
  kvserve::cache::KvLayout l;
  l.num_layers = 16;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.block_size = 16;
  l.dtype = kvserve::config::KvDtype::kBf16;
  auto dev = kvserve::cuda::CudaKvStorage::Create(l, 2 * blocks + 2);
  kvserve::cuda::PinnedHostAllocator pinned;
  auto pinned_tier = kvserve::cache::HostKvStorage::Create(l, blocks, &pinned);
  auto pageable_tier = kvserve::cache::HostKvStorage::Create(l, blocks);
  if (!dev.ok() || !pinned_tier.ok() || !pageable_tier.ok()) {
    std::fprintf(stderr, "cuda_kv_bench: allocation failed\n");
    return 1;
  }
  const double copy = DeviceCopyGbps(size_t{2} << 30);
  double po = 0, pi = 0, qo = 0, qi = 0;
  SwapGbps(**dev, **pinned_tier, blocks, po, pi);
  SwapGbps(**dev, **pageable_tier, blocks, qo, qi);
  std::printf("## CUDA KV storage (%s, CUDA runtime %d, driver %d)\n\n", probe.device_name.c_str(),
              probe.runtime_version, probe.driver_version);
  std::printf("| figure | GB/s |\n|---|---:|\n");
  std::printf("| device-to-device copy, 2 GiB, read + write (reference bandwidth) | %.0f |\n", copy);
  std::printf("| swap-out, %d blocks of %zu KiB, pinned host tier | %.1f |\n", blocks, l.bytes_per_block() >> 10, po);
  std::printf("| swap-in, pinned host tier | %.1f |\n", pi);
  std::printf("| swap-out, pageable host tier | %.1f |\n", qo);
  std::printf("| swap-in, pageable host tier | %.1f |\n", qi);
  std::printf("\n## Decode attention (bf16 KV, 8 KV heads x 128, 32 query heads, block 16)\n\n");
  std::printf("| batch x context | split | ms | KV read GB/s | %% of copy bandwidth |\n|---|---:|---:|---:|---:|\n");
  for (int split : {256, 512, 1024}) {
    double ms = 0.0;
    const double gbps = DecodeAttentionGbps(64, 8192, split, ms);
    std::printf("| 64 x 8192 | %d | %.3f | %.0f | %.1f |\n", split, ms, gbps, copy > 0 ? 100.0 * gbps / copy : 0.0);
  }
  std::printf("\n## Prefill attention (chunked prefill, bf16 KV, 8 KV heads x 128, 32 query heads, block 16)\n\n");
  std::printf("| seqs x chunk rows, context | every row split-KV, ms | tiled prefill, ms | speed-up |\n"
              "|---|---:|---:|---:|\n");
  for (auto [seqs, chunk, context] : {std::tuple{1, 2048, 2048}, std::tuple{4, 512, 8192}, std::tuple{8, 256, 4096}}) {
    const double split_ms = PrefillAttentionMs(seqs, chunk, context, false);
    const double tiled_ms = PrefillAttentionMs(seqs, chunk, context, true);
    std::printf("| %d x %d, %d | %.3f | %.3f | %.2fx |\n", seqs, chunk, context, split_ms, tiled_ms,
                tiled_ms > 0 ? split_ms / tiled_ms : 0.0);
  }
  std::printf("\n## TriAttention round on the device (bf16 KV, 16 layers x 8 KV heads x 128, GQA 4)\n\n");
  std::printf("| context -> kept | scoring + pooling per head, ms (keys stay on the device) | batched, ms "
              "(one sync) | compaction gather, ms |\n"
              "|---|---:|---:|---:|\n");
  for (auto [context, keep] : {std::pair{4096, 2048}, std::pair{16384, 4096}}) {
    double score_ms = 0.0, batched_ms = 0.0, compact_ms = 0.0;
    CompressionRoundMs(context, keep, score_ms, batched_ms, compact_ms);
    std::printf("| %d -> %d | %.2f | %.2f | %.2f |\n", context, keep + 68, score_ms, batched_ms, compact_ms);
  }
  return 0;
}
