// CUDA KV storage figures (prints; no targets asserted): the device's measured copy bandwidth,
// the reference that the decode-attention aim is stated against (issue 13: attention at >= 85%
// of it), and swap bandwidth through CudaKvStorage to pinned and to pageable host tiers, on the
// KV layout of a 1B-class Llama (16 layers, 8 KV heads, head_dim 128, block 16, bf16).
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
#include <vector>

#include "cache/host_kv_storage.h"
#include "cuda/cuda_kv_storage.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/device_probe.h"

namespace {

using kvserve::cache::BlockCopy;
using kvserve::cache::BlockId;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device cudaMemcpy of `bytes`, median of 9; GB/s counting read + write.
double DeviceCopyGbps(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0.0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> gbps;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) gbps.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return Median(gbps);
}

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

template <typename T>
T* Upload(const std::vector<T>& v) {
  T* d = nullptr;
  if (cudaMalloc(&d, v.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// Decode attention: `batch` sequences of `context` tokens, one query row each, bf16 KV,
// 8 KV heads x head_dim 128, 32 query heads (GQA 4); KV bytes read per second, median of 9.
double DecodeAttentionGbps(int batch, int context, int split, double& ms_out) {
  kvserve::cache::KvLayout l;
  l.num_layers = 1;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.block_size = 16;
  l.dtype = kvserve::config::KvDtype::kBf16;
  const int heads = 32;
  const int per_seq = context / l.block_size;
  auto dev = kvserve::cuda::CudaKvStorage::Create(l, batch * per_seq + 1);
  if (!dev.ok()) return 0.0;
  std::vector<int32_t> ids(static_cast<size_t>(batch * per_seq));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));  // scattered blocks, as in a busy pool
  std::vector<int32_t> starts(static_cast<size_t>(batch) + 1), lens(static_cast<size_t>(batch), context),
      offsets(static_cast<size_t>(batch) + 1), row_seq(static_cast<size_t>(batch));
  for (int s = 0; s <= batch; ++s) {
    starts[static_cast<size_t>(s)] = s;
    offsets[static_cast<size_t>(s)] = s * per_seq;
  }
  std::iota(row_seq.begin(), row_seq.end(), 0);
  std::vector<float> q(static_cast<size_t>(batch) * heads * l.head_dim, 0.01f);
  kvserve::kernels::cuda::DevicePagedSeqs ds;
  ds.num_seqs = batch;
  ds.num_rows = batch;
  ds.max_kv_len = context;
  ds.seq_starts = Upload(starts);
  ds.kv_lens = Upload(lens);
  ds.block_table_offsets = Upload(offsets);
  ds.block_tables = Upload(ids);
  ds.row_seq = Upload(row_seq);
  float* dq = Upload(q);
  float* out = nullptr;
  cudaMalloc(&out, q.size() * sizeof(float));
  const size_t ws_bytes = kvserve::kernels::cuda::PagedAttentionWorkspaceBytes(l, heads, ds, split);
  void* ws = nullptr;
  cudaMalloc(&ws, ws_bytes);
  auto stream = static_cast<cudaStream_t>((*dev)->stream());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(start, stream);
    const int err = kvserve::kernels::cuda::PagedAttention(l, (*dev)->device_layer_data(0), nullptr, ds, dq,
                                                           heads * l.head_dim, heads, 0.088f, out,
                                                           heads * l.head_dim, nullptr, ws, ws_bytes, split, stream);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    if (err != 0) return 0.0;
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    if (i > 0) ms.push_back(t);
  }
  ms_out = Median(ms);
  const double kv_bytes = 2.0 * batch * static_cast<double>(context) * l.num_kv_heads * l.head_dim * 2.0;
  cudaFree(ws);
  cudaFree(out);
  cudaFree(dq);
  return kv_bytes / (ms_out * 1e-3) / 1e9;
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
  return 0;
}
