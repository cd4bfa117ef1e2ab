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
    TriScoreKernel(KvGeometry layout, const std::byte* data, const float* scales, const int32_t* table,
                   int kv_head, int64_t begin, int64_t n, DeviceTriWeights wt, double* scores) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  const int hd = layout.head_dim, F = hd / 2, bs = layout.block_size;
  const int64_t slot = begin + j;
  const int64_t block = table[slot / bs];
  const int off = static_cast<int>(slot % bs);
  const std::byte* run = data + KvRunByteOffset(layout, block, 0, kv_head);
  const float* run_scales = scales != nullptr ? scales + KvRunScaleOffset(layout, block, 0, kv_head) : nullptr;
  const float ks = KvRowScale(layout, 0, run_scales, off);
  for (int g = 0; g < wt.group; ++g) {
    double trig = 0.0, norm = 0.0;
    if (wt.trig) {
      trig = -INFINITY;
      for (int p = 0; p < wt.pools; ++p) {
        const double* w = wt.w + (static_cast<int64_t>(p) * wt.group + g) * hd;
        double t = 0.0;
        for (int i = 0; i < hd; ++i) {
          t = __dadd_rn(t, __dmul_rn(w[i], static_cast<double>(LoadKvRunElem(layout, 0, run, run_scales, off, i, ks))));
        }
        trig = trig < t ? t : trig;  // std::max(trig, t)
      }
    }
    if (wt.norm) {
      const double* c = wt.c + static_cast<int64_t>(g) * F;
      for (int f = 0; f < F; ++f) {
        const double re = LoadKvRunElem(layout, 0, run, run_scales, off, f, ks);
        const double im = LoadKvRunElem(layout, 0, run, run_scales, off, f + F, ks);
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
__device__ __forceinline__ double SnapLogit(const KvGeometry& layout, const std::byte* data, const float* scales,
                                            const int32_t* table, int kv_head, const DeviceSnapKvWindow& w, int r,
                                            int g, int64_t j) {
  const int hd = layout.head_dim, bs = layout.block_size;
  const float* q = w.queries + static_cast<int64_t>(r) * w.q_stride + static_cast<int64_t>(g) * hd;
  const int64_t block = table[j / bs];
  const int off = static_cast<int>(j % bs);
  const std::byte* run = data + KvRunByteOffset(layout, block, 0, kv_head);
  const float* run_scales = scales != nullptr ? scales + KvRunScaleOffset(layout, block, 0, kv_head) : nullptr;
  const float ks = KvRowScale(layout, 0, run_scales, off);
  double dot = 0.0;
  for (int i = 0; i < hd; ++i) {
    dot = __dadd_rn(dot, __dmul_rn(static_cast<double>(q[i]),
                                   static_cast<double>(LoadKvRunElem(layout, 0, run, run_scales, off, i, ks))));
  }
  return __dmul_rn(dot, w.scale);
}

// Per (window row, query head): the softmax's max and sum over the slots the row saw.
__global__ void __launch_bounds__(kThreads)
    SnapStatsKernel(KvGeometry layout, const std::byte* data, const float* scales, const int32_t* table,
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
    SnapAttnKernel(KvGeometry layout, const std::byte* data, const float* scales, const int32_t* table,
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
constexpr int kMaxRowScales = 32;    // int4 values: head_dim 256 / kv_int4_group 8
// int4 key recode: one block of decoded key rows (block_size 128 x head_dim 256 floats).
constexpr size_t kMaxRecodeSharedBytes = 128 * 1024;

// Scale slots that move with one row of side kv (kv_compact.cc's RowMover::RowScales): one for
// fp8/int8, the groups of an int4 value row, none for int4 keys (their per-channel scales span
// the block: RecodeInt4KeysKernel) and the unscaled dtypes.
__host__ __device__ __forceinline__ int RowScaleSlots(const KvGeometry& g, int kv) {
  switch (g.dtype[kv]) {
    case config::KvDtype::kFp8E4M3:
    case config::KvDtype::kInt8: return 1;
    case config::KvDtype::kInt4: return kv == 0 ? 0 : g.v_groups;
    default: return 0;
  }
}

// One CTA per (KV head, layer) row. Destinations lo + i ascend; chunk by chunk every source is
// read into shared memory before any destination of the chunk is written. A destination is
// below every source of later chunks (keep lists ascend and keep[i] >= lo + i; the tail moves
// left), so no source is overwritten before it is read: the in-place argument of
// kernels/cpu/kv_compact.h, chunk-wise. Sides [kv_begin, 2) move (K is skipped when it is int4).
__global__ void __launch_bounds__(kThreads)
    CompactKernel(KvGeometry geo, std::byte* const* layer_data, float* const* layer_scales, const int32_t* table,
                  int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep, const int32_t* keep,
                  int kv_begin) {
  const int head = static_cast<int>(blockIdx.x), layer = static_cast<int>(blockIdx.y);
  const int bs = geo.block_size;
  const int64_t row = static_cast<int64_t>(layer) * geo.num_kv_heads + head;
  const int32_t* k = keep + row * num_keep;
  const int64_t shift = scored_end - (lo + num_keep);
  const int64_t moves = num_keep + (shift > 0 ? phys_len - scored_end : 0);
  std::byte* data = layer_data[layer];
  float* scales = layer_scales != nullptr ? layer_scales[layer] : nullptr;
  // Rows start at multiples of their row bytes inside runs that start at multiples of both
  // sides' row bytes: words when both are multiples of 4.
  const bool words = geo.row_bytes[0] % 4 == 0 && geo.row_bytes[1] % 4 == 0;
  int units[2], slots[2];
  for (int kv = 0; kv < 2; ++kv) {
    units[kv] = kv < kv_begin ? 0 : static_cast<int>(words ? geo.row_bytes[kv] / 4 : geo.row_bytes[kv]);
    slots[kv] = kv < kv_begin ? 0 : RowScaleSlots(geo, kv);
  }
  const int per_row = units[0] + units[1] + slots[0] + slots[1];

  __shared__ uint32_t stage_w[kCompactRows][2][kMaxRowBytes / 4];
  __shared__ float stage_s[kCompactRows][2][kMaxRowScales];
  auto* stage_b = reinterpret_cast<uint8_t(*)[2][kMaxRowBytes]>(stage_w);
  auto src_of = [&](int64_t i) { return i < num_keep ? static_cast<int64_t>(k[i]) : scored_end + (i - num_keep); };
  // Item u of a row: data units of K, of V, then scale slots of K, of V.
  auto decode_item = [&](int u, int& kv, int& unit, bool& scale) {
    scale = u >= units[0] + units[1];
    if (!scale) {
      kv = u < units[0] ? 0 : 1;
      unit = kv == 0 ? u : u - units[0];
    } else {
      u -= units[0] + units[1];
      kv = u < slots[0] ? 0 : 1;
      unit = kv == 0 ? u : u - slots[0];
    }
  };

  for (int64_t c0 = 0; c0 < moves; c0 += kCompactRows) {
    const int cn = static_cast<int>(moves - c0 < kCompactRows ? moves - c0 : kCompactRows);
    for (int e = static_cast<int>(threadIdx.x); e < cn * per_row; e += kThreads) {
      const int r = e / per_row;
      int kv, unit;
      bool scale;
      decode_item(e % per_row, kv, unit, scale);
      const int64_t src = src_of(c0 + r);
      if (src == lo + c0 + r) continue;  // already in place
      const int64_t sb = table[src / bs];
      const int so = static_cast<int>(src % bs);
      if (scale) {
        stage_s[r][kv][unit] = scales[KvRunScaleOffset(geo, sb, kv, head) + so * slots[kv] + unit];
        continue;
      }
      const std::byte* from = data + KvRunByteOffset(geo, sb, kv, head) + so * geo.row_bytes[kv];
      if (words) {
        stage_w[r][kv][unit] = reinterpret_cast<const uint32_t*>(from)[unit];
      } else {
        stage_b[r][kv][unit] = reinterpret_cast<const uint8_t*>(from)[unit];
      }
    }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < cn * per_row; e += kThreads) {
      const int r = e / per_row;
      int kv, unit;
      bool scale;
      decode_item(e % per_row, kv, unit, scale);
      const int64_t dst = lo + c0 + r;
      if (src_of(c0 + r) == dst) continue;
      const int64_t db = table[dst / bs];
      const int d_off = static_cast<int>(dst % bs);
      if (scale) {
        scales[KvRunScaleOffset(geo, db, kv, head) + d_off * slots[kv] + unit] = stage_s[r][kv][unit];
        continue;
      }
      std::byte* to = data + KvRunByteOffset(geo, db, kv, head) + d_off * geo.row_bytes[kv];
      if (words) {
        reinterpret_cast<uint32_t*>(to)[unit] = stage_w[r][kv][unit];
      } else {
        reinterpret_cast<uint8_t*>(to)[unit] = stage_b[r][kv][unit];
      }
    }
    __syncthreads();
  }
}

// int4 keys (kv_compact.cc's RecodeInt4KeyBlocks): one CTA per (KV head, layer) row. Every
// block from the first one a moved row lands in is rebuilt in ascending order: its new rows
// are decoded from wherever they live now (this block, not yet rewritten, or a later one)
// into shared memory, then the block is encoded afresh over them, a thread per channel pair.
__global__ void __launch_bounds__(kThreads)
    RecodeInt4KeysKernel(KvGeometry geo, std::byte* const* layer_data, float* const* layer_scales,
                         const int32_t* table, int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep,
                         const int32_t* keep) {
  extern __shared__ float rows_s[];  // [block_size][head_dim]
  __shared__ int64_t first_dst_s;
  const int head = static_cast<int>(blockIdx.x), layer = static_cast<int>(blockIdx.y);
  const int bs = geo.block_size, hd = geo.head_dim;
  const int64_t row = static_cast<int64_t>(layer) * geo.num_kv_heads + head;
  const int32_t* k = keep + row * num_keep;
  const int64_t shift = scored_end - (lo + num_keep);
  const int64_t tail = phys_len - scored_end;
  const int64_t new_len = lo + num_keep + tail;
  if (threadIdx.x == 0) {
    int64_t i = 0;
    while (i < num_keep && k[i] == lo + i) ++i;
    // As the CPU: nothing to rebuild when every kept row is in place and no tail moves.
    first_dst_s = (i < num_keep || (shift > 0 && tail > 0)) ? (i < num_keep ? lo + i : lo + num_keep) : -1;
  }
  __syncthreads();
  const int64_t first_dst = first_dst_s;
  if (first_dst < 0) return;
  std::byte* data = layer_data[layer];
  float* scales = layer_scales[layer];
  auto source = [&](int64_t p) -> int64_t {
    if (p < lo) return p;
    if (p < lo + num_keep) return k[p - lo];
    return p + shift;
  };
  for (int64_t d = first_dst / bs; d * bs < new_len; ++d) {
    const int n = static_cast<int>(new_len - d * bs < bs ? new_len - d * bs : bs);
    for (int e = static_cast<int>(threadIdx.x); e < n * hd; e += kThreads) {
      const int r = e / hd, c = e % hd;
      const int64_t src = source(d * bs + r);
      const int64_t sb = table[src / bs];
      rows_s[e] = LoadKvRunElem(geo, 0, data + KvRunByteOffset(geo, sb, 0, head),
                                scales + KvRunScaleOffset(geo, sb, 0, head), static_cast<int>(src % bs), c, 1.0f);
    }
    __syncthreads();
    const int64_t db = table[d];
    auto* run = reinterpret_cast<uint8_t*>(data + KvRunByteOffset(geo, db, 0, head));
    float* run_scales = scales + KvRunScaleOffset(geo, db, 0, head);
    for (int pair = static_cast<int>(threadIdx.x); pair < (hd + 1) / 2; pair += kThreads) {
      WriteInt4KeyPair(run, run_scales, hd, 0, n, rows_s, hd, pair);
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
      MakeKvGeometry(layout), layer_data, layer_scales, table, kv_head, begin, end - begin, weights, scores);
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
  const KvGeometry geo = MakeKvGeometry(layout);
  auto* stats = static_cast<double*>(workspace);
  double* attn = stats + static_cast<int64_t>(window.group) * window.num_queries * 2;
  const int64_t pe = window.prefix_end > 0 ? window.prefix_end : 0;
  if (window.num_queries > 0) {
    SnapStatsKernel<<<dim3(static_cast<unsigned>(window.num_queries), static_cast<unsigned>(window.group)), kThreads,
                      0, st>>>(geo, layer_data, layer_scales, table, kv_head, window, stats);
  }
  if (pe > 0) {
    SnapAttnKernel<<<dim3(Blocks(pe), static_cast<unsigned>(window.group)), kThreads, 0, st>>>(
        geo, layer_data, layer_scales, table, kv_head, window, stats, attn);
  }
  SnapPoolKernel<<<Blocks(n - lo), kThreads, 0, st>>>(window, lo, n, attn, row);
  return static_cast<int>(cudaGetLastError());
}

int CompactKv(const cache::KvLayout& layout, std::byte* const* layer_data, float* const* layer_scales,
              const int32_t* table, int64_t lo, int64_t scored_end, int64_t phys_len, int64_t num_keep,
              const int32_t* keep, void* stream) {
  const KvGeometry geo = MakeKvGeometry(layout);
  const bool int4_keys = layout.k_dtype() == config::KvDtype::kInt4;
  const size_t recode_smem = static_cast<size_t>(layout.block_size) * static_cast<size_t>(layout.head_dim) * sizeof(float);
  if (layout.head_dim < 1 || geo.row_bytes[0] > kMaxRowBytes || geo.row_bytes[1] > kMaxRowBytes ||
      RowScaleSlots(geo, 1) > kMaxRowScales || layout.num_layers < 1 || layout.num_kv_heads < 1 ||
      !(0 <= lo && lo <= scored_end && scored_end <= phys_len) || num_keep < 0 || num_keep > scored_end - lo ||
      (num_keep > 0 && keep == nullptr) || (layout.has_scales() && layer_scales == nullptr) ||
      (int4_keys && recode_smem > kMaxRecodeSharedBytes)) {
    return cudaErrorInvalidValue;
  }
  if (num_keep == scored_end - lo) return cudaSuccess;  // nothing dropped: nothing moves
  const dim3 grid(static_cast<unsigned>(layout.num_kv_heads), static_cast<unsigned>(layout.num_layers));
  auto st = static_cast<cudaStream_t>(stream);
  if (int4_keys) {
    // Past 48 KiB of dynamic shared memory a kernel must opt in (block 128 x head_dim 128).
    const int err = static_cast<int>(cudaFuncSetAttribute(RecodeInt4KeysKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(recode_smem)));
    if (err != cudaSuccess) return err;
    // K and V touch disjoint bytes, so the two kernels' order does not matter.
    RecodeInt4KeysKernel<<<grid, kThreads, recode_smem, st>>>(geo, layer_data, layer_scales, table, lo, scored_end,
                                                              phys_len, num_keep, keep);
  }
  CompactKernel<<<grid, kThreads, 0, st>>>(geo, layer_data, layout.has_scales() ? layer_scales : nullptr, table, lo,
                                           scored_end, phys_len, num_keep, keep, int4_keys ? 1 : 0);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
