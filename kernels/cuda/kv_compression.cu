#include "kernels/cuda/kv_compression.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/kv_codes.cuh"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// ------------------------------------------------------------------ TriAttention scores

// One thread per candidate slot: every query head of the group, in the CPU scorer's order.
// Explicit _rn operations: nvcc must not contract a product and a sum into an FMA (the host
// code is compiled without FMA), so each score is the CPU's bit for bit.
__global__ void __launch_bounds__(kThreads)
    TriScoreKernel(cache::KvLayout layout, const std::byte* data, const float* scales, const int32_t* table,
                   int kv_head, int64_t begin, int64_t n, DeviceTriWeights wt, double* scores) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  const int hd = layout.head_dim, F = hd / 2, bs = layout.block_size;
  const int64_t slot = begin + j;
  const int64_t block = table[slot / bs];
  const int off = static_cast<int>(slot % bs);
  const size_t base = KvElemOffset(layout, block, 0, kv_head, off);
  const float ks = KvScaled(layout.dtype) ? scales[KvScaleOffset(layout, block, 0, kv_head, off)] : 1.0f;
  for (int g = 0; g < wt.group; ++g) {
    double trig = 0.0, norm = 0.0;
    if (wt.trig) {
      trig = -INFINITY;
      for (int p = 0; p < wt.pools; ++p) {
        const double* w = wt.w + (static_cast<int64_t>(p) * wt.group + g) * hd;
        double t = 0.0;
        for (int i = 0; i < hd; ++i) {
          t = __dadd_rn(t, __dmul_rn(w[i], static_cast<double>(LoadKvElem(layout.dtype, data, base, i, ks))));
        }
        trig = trig < t ? t : trig;  // std::max(trig, t)
      }
    }
    if (wt.norm) {
      const double* c = wt.c + static_cast<int64_t>(g) * F;
      for (int f = 0; f < F; ++f) {
        const double re = LoadKvElem(layout.dtype, data, base, f, ks);
        const double im = LoadKvElem(layout.dtype, data, base, f + F, ks);
        const double mag = __dsqrt_rn(__dadd_rn(__dmul_rn(re, re), __dmul_rn(im, im)));
        norm = __dadd_rn(norm, __dmul_rn(c[f], mag));
      }
    }
    scores[static_cast<int64_t>(g) * n + j] = __dadd_rn(trig, norm);
  }
}

// ------------------------------------------------------------------ z-normalisation and GQA max

__device__ double BlockSum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

// One CTA per query head's row: (v - mean) / max(population std, min_std), in place.
__global__ void __launch_bounds__(kThreads) ZNormKernel(double* scores, int64_t n, double min_std) {
  __shared__ double part[kThreads / 32];
  double* row = scores + static_cast<int64_t>(blockIdx.x) * n;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) sum += row[j];
  const double mean = BlockSum(sum, part) / static_cast<double>(n);
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const double d = row[j] - mean;
    sq = __dadd_rn(sq, __dmul_rn(d, d));
  }
  const double var = BlockSum(sq, part);
  const double sd = sqrt(var / static_cast<double>(n));
  const double inv = 1.0 / (sd < min_std ? min_std : sd);
  for (int64_t j = threadIdx.x; j < n; j += kThreads) row[j] = (row[j] - mean) * inv;
}

__global__ void __launch_bounds__(kThreads) MaxPoolKernel(const double* scores, int group, int64_t n, double* pooled) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  double acc = -INFINITY;
  for (int g = 0; g < group; ++g) {
    const double v = scores[static_cast<int64_t>(g) * n + j];
    acc = acc < v ? v : acc;  // std::max(acc, v)
  }
  pooled[j] = acc;
}

// ------------------------------------------------------------------ SnapKV window scores

__device__ double BlockMax(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double m = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) m = fmax(m, shared[w]);
  return m;
}

// The scaled logit of window row r (query head g of the group) against slot j: the CPU
// policy's float64 dot product, term by term.
__device__ __forceinline__ double SnapLogit(const cache::KvLayout& layout, const std::byte* data, const float* scales,
                                            const int32_t* table, int kv_head, const DeviceSnapKvWindow& w, int r,
                                            int g, int64_t j) {
  const int hd = layout.head_dim, bs = layout.block_size;
  const float* q = w.queries + static_cast<int64_t>(r) * w.q_stride + static_cast<int64_t>(g) * hd;
  const int64_t block = table[j / bs];
  const int off = static_cast<int>(j % bs);
  const size_t base = KvElemOffset(layout, block, 0, kv_head, off);
  const float ks = KvScaled(layout.dtype) ? scales[KvScaleOffset(layout, block, 0, kv_head, off)] : 1.0f;
  double dot = 0.0;
  for (int i = 0; i < hd; ++i) {
    dot = __dadd_rn(dot, __dmul_rn(static_cast<double>(q[i]),
                                   static_cast<double>(LoadKvElem(layout.dtype, data, base, i, ks))));
  }
  return __dmul_rn(dot, w.scale);
}

// Per (window row, query head): the softmax's max and sum over the slots the row saw.
__global__ void __launch_bounds__(kThreads)
    SnapStatsKernel(cache::KvLayout layout, const std::byte* data, const float* scales, const int32_t* table,
                    int kv_head, DeviceSnapKvWindow w, double* stats) {
  __shared__ double part[kThreads / 32];
  const int r = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int64_t seen = w.seen[r];
  double mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < seen; j += kThreads) {
    mx = fmax(mx, SnapLogit(layout, data, scales, table, kv_head, w, r, g, j));
  }
  mx = BlockMax(mx, part);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < seen; j += kThreads) {
    sum += exp(SnapLogit(layout, data, scales, table, kv_head, w, r, g, j) - mx);
  }
  sum = BlockSum(sum, part);
  if (threadIdx.x == 0) {
    double* st = stats + (static_cast<int64_t>(g) * w.num_queries + r) * 2;
    st[0] = mx;
    st[1] = sum;
  }
}

// attn[g][j] for j < prefix_end: the window rows' probabilities summed in row order.
__global__ void __launch_bounds__(kThreads)
    SnapAttnKernel(cache::KvLayout layout, const std::byte* data, const float* scales, const int32_t* table,
                   int kv_head, DeviceSnapKvWindow w, const double* stats, double* attn) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int g = static_cast<int>(blockIdx.y);
  if (j >= w.prefix_end) return;
  double a = 0.0;
  for (int r = 0; r < w.num_queries; ++r) {
    const int64_t upto = w.seen[r] < w.prefix_end ? w.seen[r] : w.prefix_end;
    if (j >= upto) continue;
    const double* st = stats + (static_cast<int64_t>(g) * w.num_queries + r) * 2;
    a += exp(SnapLogit(layout, data, scales, table, kv_head, w, r, g, j) - st[0]) / st[1];
  }
  attn[static_cast<int64_t>(g) * w.prefix_end + j] = a;
}

// row[j - lo]: average pool over [0, prefix_end), then the group mean; +inf for the window.
__global__ void __launch_bounds__(kThreads)
    SnapPoolKernel(DeviceSnapKvWindow w, int64_t lo, int64_t n, const double* attn, double* row) {
  const int64_t j = lo + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  if (j >= w.prefix_end) {
    row[j - lo] = INFINITY;
    return;
  }
  const int half = w.pool_kernel / 2;
  const int64_t o_begin = j - half > 0 ? j - half : 0;
  const int64_t o_end = j + half < w.prefix_end - 1 ? j + half : w.prefix_end - 1;
  double v = 0.0;
  for (int g = 0; g < w.group; ++g) {
    const double* ag = attn + static_cast<int64_t>(g) * w.prefix_end;
    double acc = 0.0;
    for (int64_t o = o_begin; o <= o_end; ++o) acc += ag[o];
    v += acc / w.pool_kernel / w.group;
  }
  row[j - lo] = v;
}

// ------------------------------------------------------------------ compaction gather

constexpr int kCompactRows = 16;     // destination slots staged per round trip
constexpr int kMaxRowBytes = 1024;   // head_dim 256 x fp32

// One CTA per (KV head, layer) row. Destinations lo + i ascend; chunk by chunk every source is
// read into shared memory before any destination of the chunk is written. A destination is
// below every source of later chunks (keep lists ascend and keep[i] >= lo + i; the tail moves
// left), so no source is overwritten before it is read: the in-place argument of
// kernels/cpu/kv_compact.h, chunk-wise.
__global__ void __launch_bounds__(kThreads)
    CompactKernel(cache::KvLayout layout, std::byte* const* layer_data, float* const* layer_scales,
                  const int32_t* table, int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep,
                  const int32_t* keep, int eb) {
  const int head = static_cast<int>(blockIdx.x), layer = static_cast<int>(blockIdx.y);
  const int bs = layout.block_size;
  const int64_t row = static_cast<int64_t>(layer) * layout.num_kv_heads + head;
  const int32_t* k = keep + row * num_keep;
  const int64_t shift = scored_end - (lo + num_keep);
  const int64_t moves = num_keep + (shift > 0 ? phys_len - scored_end : 0);
  std::byte* data = layer_data[layer];
  float* scales = KvScaled(layout.dtype) ? layer_scales[layer] : nullptr;
  const int row_bytes = layout.head_dim * eb;
  const bool words = row_bytes % 4 == 0;  // rows start at multiples of row_bytes
  const int units = words ? row_bytes / 4 : row_bytes;

  __shared__ uint32_t stage_w[kCompactRows][2][kMaxRowBytes / 4];
  __shared__ float stage_s[kCompactRows][2];
  auto* stage_b = reinterpret_cast<uint8_t(*)[2][kMaxRowBytes]>(stage_w);
  auto src_of = [&](int64_t i) { return i < num_keep ? static_cast<int64_t>(k[i]) : scored_end + (i - num_keep); };

  for (int64_t c0 = 0; c0 < moves; c0 += kCompactRows) {
    const int cn = static_cast<int>(moves - c0 < kCompactRows ? moves - c0 : kCompactRows);
    for (int e = static_cast<int>(threadIdx.x); e < cn * 2 * units; e += kThreads) {
      const int r = e / (2 * units), kv = (e / units) % 2, u = e % units;
      const int64_t src = src_of(c0 + r);
      if (src == lo + c0 + r) continue;  // already in place
      const int64_t sb = table[src / bs];
      const int so = static_cast<int>(src % bs);
      const std::byte* from = data + KvElemOffset(layout, sb, kv, head, so) * eb;
      if (words) {
        stage_w[r][kv][u] = reinterpret_cast<const uint32_t*>(from)[u];
      } else {
        stage_b[r][kv][u] = reinterpret_cast<const uint8_t*>(from)[u];
      }
      if (u == 0 && scales != nullptr) stage_s[r][kv] = scales[KvScaleOffset(layout, sb, kv, head, so)];
    }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < cn * 2 * units; e += kThreads) {
      const int r = e / (2 * units), kv = (e / units) % 2, u = e % units;
      const int64_t dst = lo + c0 + r;
      if (src_of(c0 + r) == dst) continue;
      const int64_t db = table[dst / bs];
      const int d_off = static_cast<int>(dst % bs);
      std::byte* to = data + KvElemOffset(layout, db, kv, head, d_off) * eb;
      if (words) {
        reinterpret_cast<uint32_t*>(to)[u] = stage_w[r][kv][u];
      } else {
        reinterpret_cast<uint8_t*>(to)[u] = stage_b[r][kv][u];
      }
      if (u == 0 && scales != nullptr) scales[KvScaleOffset(layout, db, kv, head, d_off)] = stage_s[r][kv];
    }
    __syncthreads();
  }
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

int TriAttentionScores(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                       const int32_t* table, int kv_head, int64_t begin, int64_t end, const DeviceTriWeights& weights,
                       double* scores, void* stream) {
  if (end <= begin) return cudaSuccess;
  if (layout.head_dim < 2 || layout.head_dim % 2 != 0 || kv_head < 0 || kv_head >= layout.num_kv_heads ||
      weights.group < 1 || weights.pools < 1 || (weights.trig && weights.w == nullptr) ||
      (weights.norm && weights.c == nullptr) || (layout.has_scales() && layer_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  TriScoreKernel<<<Blocks(end - begin), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      layout, layer_data, layer_scales, table, kv_head, begin, end - begin, weights, scores);
  return static_cast<int>(cudaGetLastError());
}

int ZNormMaxPool(double* scores, int group, int64_t n, double min_std, double* pooled, void* stream) {
  if (n <= 0) return cudaSuccess;
  if (group < 1) return cudaErrorInvalidValue;
  auto st = static_cast<cudaStream_t>(stream);
  ZNormKernel<<<static_cast<unsigned>(group), kThreads, 0, st>>>(scores, n, min_std);
  MaxPoolKernel<<<Blocks(n), kThreads, 0, st>>>(scores, group, n, pooled);
  return static_cast<int>(cudaGetLastError());
}

size_t SnapKvWorkspaceBytes(int group, int num_queries, int64_t prefix_end) {
  const int64_t pe = prefix_end > 0 ? prefix_end : 0;
  return (static_cast<size_t>(group) * static_cast<size_t>(num_queries) * 2 +
          static_cast<size_t>(group) * static_cast<size_t>(pe)) *
         sizeof(double);
}

int SnapKvScores(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                 const int32_t* table, int kv_head, int64_t lo, int64_t n, const DeviceSnapKvWindow& window,
                 void* workspace, double* row, void* stream) {
  if (n <= lo) return cudaSuccess;
  if (layout.head_dim < 1 || kv_head < 0 || kv_head >= layout.num_kv_heads || window.group < 1 ||
      window.num_queries < 0 || window.pool_kernel < 1 || window.prefix_end > n || lo < 0 ||
      (window.num_queries > 0 && (window.queries == nullptr || window.seen == nullptr)) ||
      (layout.has_scales() && layer_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  auto st = static_cast<cudaStream_t>(stream);
  auto* stats = static_cast<double*>(workspace);
  double* attn = stats + static_cast<int64_t>(window.group) * window.num_queries * 2;
  const int64_t pe = window.prefix_end > 0 ? window.prefix_end : 0;
  if (window.num_queries > 0) {
    SnapStatsKernel<<<dim3(static_cast<unsigned>(window.num_queries), static_cast<unsigned>(window.group)), kThreads,
                      0, st>>>(layout, layer_data, layer_scales, table, kv_head, window, stats);
  }
  if (pe > 0) {
    SnapAttnKernel<<<dim3(Blocks(pe), static_cast<unsigned>(window.group)), kThreads, 0, st>>>(
        layout, layer_data, layer_scales, table, kv_head, window, stats, attn);
  }
  SnapPoolKernel<<<Blocks(n - lo), kThreads, 0, st>>>(window, lo, n, attn, row);
  return static_cast<int>(cudaGetLastError());
}

int CompactKv(const cache::KvLayout& layout, std::byte* const* layer_data, float* const* layer_scales,
              const int32_t* table, int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep,
              const int32_t* keep, void* stream) {
  if (layout.head_dim < 1 || static_cast<size_t>(layout.head_dim) * layout.elem_bytes() > kMaxRowBytes ||
      layout.num_layers < 1 || layout.num_kv_heads < 1 || !(0 <= lo && lo <= scored_end && scored_end <= phys_len) ||
      num_keep < 0 || num_keep > scored_end - lo || (num_keep > 0 && keep == nullptr) ||
      (layout.has_scales() && layer_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (num_keep == scored_end - lo) return cudaSuccess;  // nothing dropped: nothing moves
  const dim3 grid(static_cast<unsigned>(layout.num_kv_heads), static_cast<unsigned>(layout.num_layers));
  CompactKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(layout, layer_data, layer_scales, table, lo,
                                                                         scored_end, phys_len, num_keep, keep,
                                                                         static_cast<int>(layout.elem_bytes()));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
