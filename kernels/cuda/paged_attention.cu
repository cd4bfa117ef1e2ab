#include "kernels/cuda/paged_attention.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/split_kv_params.cuh"

namespace kvserve::kernels::cuda {
namespace {

using detail::kThreads;
using detail::kWarps;
using detail::Params;

// The (block, kv, g) run of layer data and its scales.
struct Run {
  const std::byte* data;
  const float* scales;
};
__device__ __forceinline__ Run RunOf(const Params& p, int64_t block, int kv, int g) {
  return {p.data + KvRunByteOffset(p.geo, block, kv, g),
          p.scales != nullptr ? p.scales + KvRunScaleOffset(p.geo, block, kv, g) : nullptr};
}
__device__ __forceinline__ float Load(const Params& p, int kv, const Run& r, int off, int i, float row_scale) {
  return LoadKvRunElem(p.geo, kv, r.data, r.scales, off, i, row_scale);
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// kElems = ceil(head_dim / 32): lane l owns elements l, l + 32, ... (coalesced per warp).
template <int kElems>
__global__ void __launch_bounds__(kThreads) SplitKernel(Params p) {
  const int row_index = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int hd = p.layout.head_dim, group = p.group;
  const detail::SplitSlots slots = detail::SplitSlotsOf(p, row_index, split);
  const int row = slots.row, s = slots.seq, begin = slots.begin, end = slots.end;

  __shared__ float q_s[kMaxAttentionGroup][kMaxAttentionHeadDim];
  __shared__ float m_s[kWarps][kMaxAttentionGroup];
  __shared__ float l_s[kWarps][kMaxAttentionGroup];
  __shared__ float acc_s[kWarps][kMaxAttentionGroup][kMaxAttentionHeadDim];
  for (int i = static_cast<int>(threadIdx.x); i < group * hd; i += kThreads) {
    q_s[i / hd][i % hd] = p.q[static_cast<int64_t>(row) * p.q_stride + static_cast<int64_t>(g) * group * hd + i];
  }
  __syncthreads();

  float qr[kMaxAttentionGroup][kElems];
  float acc[kMaxAttentionGroup][kElems];
  float m[kMaxAttentionGroup], l[kMaxAttentionGroup];
#pragma unroll
  for (int h = 0; h < kMaxAttentionGroup; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      qr[h][e] = (h < group && d < hd) ? q_s[h][d] : 0.0f;
      acc[h][e] = 0.0f;
    }
  }

  const int bs = p.layout.block_size;
  const int32_t* table = p.seqs.block_tables + p.seqs.block_table_offsets[s];
  for (int i = begin + warp; i < end; i += kWarps) {
    const int64_t block = table[i / bs];
    const int off = i % bs;
    const Run kr = RunOf(p, block, 0, g), vr = RunOf(p, block, 1, g);
    const float ks = KvRowScale(p.geo, 0, kr.scales, off), vs = KvRowScale(p.geo, 1, vr.scales, off);
    float k[kElems], v[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      k[e] = d < hd ? Load(p, 0, kr, off, d, ks) : 0.0f;
      v[e] = d < hd ? Load(p, 1, vr, off, d, vs) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kMaxAttentionGroup; ++h) {
      if (h >= group) break;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kElems; ++e) dot += qr[h][e] * k[e];
      const float score = detail::Softcap(p, WarpSum(dot) * p.scale);
      const float new_m = fmaxf(m[h], score);
      const float corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - new_m);
      const float pr = expf(score - new_m);
      l[h] = l[h] * corr + pr;
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[h][e] = acc[h][e] * corr + pr * v[e];
      m[h] = new_m;
    }
  }

  // Merge the warps, then write this split's partial.
#pragma unroll
  for (int h = 0; h < kMaxAttentionGroup; ++h) {
    if (h >= group) break;
    if (lane == 0) {
      m_s[warp][h] = m[h];
      l_s[warp][h] = l[h];
    }
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      if (d < hd) acc_s[warp][h][d] = acc[h][e];
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < group * hd; i += kThreads) {
    const int h = i / hd, d = i % hd;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][h]);
    float sum = 0.0f, a = 0.0f;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        if (m_s[w][h] == -INFINITY) continue;
        const float f = expf(m_s[w][h] - mx);
        sum += l_s[w][h] * f;
        a += acc_s[w][h][d] * f;
      }
    }
    const int64_t slot = (static_cast<int64_t>(row_index) * p.num_heads + g * group + h) * p.num_splits + split;
    p.ws_acc[slot * hd + d] = a;
    if (d == 0) {
      p.ws_m[slot] = mx;
      p.ws_l[slot] = sum;
    }
  }
}

__global__ void CombineKernel(Params p, float* out, int64_t out_stride, float* lse) {
  const int row_index = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const int row = detail::SplitRow(p, row_index);
  const int hd = p.layout.head_dim;
  const int64_t base = (static_cast<int64_t>(row_index) * p.num_heads + head) * p.num_splits;
  float mx = -INFINITY;
  for (int sp = 0; sp < p.num_splits; ++sp) mx = fmaxf(mx, p.ws_m[base + sp]);
  float sum = 0.0f;
  for (int sp = 0; sp < p.num_splits; ++sp) {
    if (p.ws_m[base + sp] != -INFINITY) sum += p.ws_l[base + sp] * expf(p.ws_m[base + sp] - mx);
  }
  // As kernels/cpu/attention_tile.h FinishSoftmax: a sink logit joins the denominator.
  float factor = 1.0f / sum, lse_v = mx + logf(sum);
  if (p.sinks != nullptr) {
    const float sink = p.sinks[head];
    const float m = fmaxf(mx, sink);
    const float corr = expf(mx - m);
    const float total = sum * corr + expf(sink - m);
    factor = corr / total;
    lse_v = m + logf(total);
  }
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += static_cast<int>(blockDim.x)) {
    float a = 0.0f;
    for (int sp = 0; sp < p.num_splits; ++sp) {
      if (p.ws_m[base + sp] != -INFINITY) a += p.ws_acc[(base + sp) * hd + d] * expf(p.ws_m[base + sp] - mx);
    }
    out[static_cast<int64_t>(row) * out_stride + static_cast<int64_t>(head) * hd + d] = a * factor;
  }
  if (lse != nullptr && threadIdx.x == 0) lse[static_cast<int64_t>(row) * p.num_heads + head] = lse_v;
}

// ------------------------------------------------------------------ tiled prefill

constexpr int kChunk = 32;                                  // slots per shared-memory chunk
constexpr int kTileAcc = kMaxPrefillTileFloats / kThreads;  // accumulators per thread

// Dynamic shared memory of a tile of `vecs` query vectors (rows x group): queries, K chunk
// (rows padded by one float against bank conflicts), V chunk, scores, and per vector the
// running max, sum and this chunk's correction.
size_t TileSharedBytes(int vecs, int hd) {
  return (static_cast<size_t>(vecs) * hd + static_cast<size_t>(kChunk) * (2 * hd + 1) +
          static_cast<size_t>(vecs) * kChunk + 3 * static_cast<size_t>(vecs)) *
         sizeof(float);
}

__global__ void __launch_bounds__(kThreads) TileKernel(Params p, float* out, int64_t out_stride, float* lse) {
  const int tile = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x);
  const int hd = p.layout.head_dim, group = p.group, bs = p.layout.block_size;
  const int first = p.seqs.tiles[2 * tile], rows = p.seqs.tiles[2 * tile + 1];
  const int s = p.seqs.row_seq[first];
  const int start = p.seqs.seq_starts[s];
  const int n = p.seqs.seq_starts[s + 1] - start;
  const int kv_len = p.seqs.kv_lens[s];
  // Row r of the tile (query row first + r) attends slots [0, base_attend + r].
  const int base_attend = kv_len - n + (first - start);
  const int end = base_attend + rows;  // slots the tile's last row attends
  const int vecs = rows * group;       // query vector v = r * group + h
  const int elems = vecs * hd;         // <= kMaxPrefillTileFloats (checked at launch)

  extern __shared__ float smem[];
  float* q_s = smem;                            // [vecs][hd]
  float* k_s = q_s + vecs * hd;                 // [kChunk][hd + 1]
  float* v_s = k_s + kChunk * (hd + 1);         // [kChunk][hd]
  float* sc_s = v_s + kChunk * hd;              // [vecs][kChunk]
  float* m_s = sc_s + vecs * kChunk;            // [vecs]
  float* l_s = m_s + vecs;                      // [vecs]
  float* c_s = l_s + vecs;                      // [vecs]

  for (int i = tid; i < elems; i += kThreads) {
    const int v = i / hd, d = i % hd;
    const int r = v / group, h = v % group;
    q_s[i] = p.q[static_cast<int64_t>(first + r) * p.q_stride + static_cast<int64_t>(g * group + h) * hd + d];
  }
  for (int v = tid; v < vecs; v += kThreads) {
    m_s[v] = -INFINITY;
    l_s[v] = 0.0f;
  }
  float acc[kTileAcc];
#pragma unroll
  for (int k = 0; k < kTileAcc; ++k) acc[k] = 0.0f;

  const int32_t* table = p.seqs.block_tables + p.seqs.block_table_offsets[s];
  // With a window, row r attends [base_attend + r + 1 - window, base_attend + r]: chunks wholly
  // before row 0's window are skipped (their blocks may be released).
  const int first_slot = detail::WindowStart(p, base_attend + 1);
  for (int c0 = first_slot / kChunk * kChunk; c0 < end; c0 += kChunk) {
    const int cn = min(kChunk, end - c0);
    __syncthreads();  // the previous chunk's V and scores are consumed; q_s, m_s, l_s written
    for (int i = tid; i < cn * hd; i += kThreads) {
      const int c = i / hd, d = i % hd;
      const int slot = c0 + c;
      if (slot < first_slot) {  // before every row's window: never read (the block may be null)
        k_s[c * (hd + 1) + d] = 0.0f;
        v_s[c * hd + d] = 0.0f;
        continue;
      }
      const int64_t block = table[slot / bs];
      const int off = slot % bs;
      const Run kr = RunOf(p, block, 0, g), vr = RunOf(p, block, 1, g);
      const float ks = KvRowScale(p.geo, 0, kr.scales, off), vsc = KvRowScale(p.geo, 1, vr.scales, off);
      k_s[c * (hd + 1) + d] = Load(p, 0, kr, off, d, ks);
      v_s[c * hd + d] = Load(p, 1, vr, off, d, vsc);
    }
    __syncthreads();
    for (int i = tid; i < vecs * kChunk; i += kThreads) {
      const int v = i / kChunk, c = i % kChunk;
      const int r = v / group;
      float score = -INFINITY;
      if (c < cn && c0 + c <= base_attend + r && c0 + c >= detail::WindowStart(p, base_attend + r + 1)) {
        const float* qv = q_s + v * hd;
        const float* kc = k_s + c * (hd + 1);
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qv[d] * kc[d];
        score = detail::Softcap(p, dot * p.scale);
      }
      sc_s[i] = score;
    }
    __syncthreads();
    // Online softmax, one thread per query vector; the scores become probabilities.
    for (int v = tid; v < vecs; v += kThreads) {
      float* sv = sc_s + v * kChunk;
      float mx = m_s[v];
      for (int c = 0; c < cn; ++c) mx = fmaxf(mx, sv[c]);
      float corr = 1.0f, sum = 0.0f;
      if (mx != -INFINITY) {
        corr = m_s[v] == -INFINITY ? 0.0f : expf(m_s[v] - mx);
        for (int c = 0; c < kChunk; ++c) {
          const float pr = (c < cn && sv[c] != -INFINITY) ? expf(sv[c] - mx) : 0.0f;
          sv[c] = pr;
          sum += pr;
        }
      } else {
        for (int c = 0; c < kChunk; ++c) sv[c] = 0.0f;
      }
      m_s[v] = mx;
      l_s[v] = l_s[v] * corr + sum;
      c_s[v] = corr;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileAcc; ++k) {
      const int e = tid + k * kThreads;
      if (e < elems) {
        const int v = e / hd, d = e % hd;
        const float* pv = sc_s + v * kChunk;
        float a = acc[k] * c_s[v];
        for (int c = 0; c < cn; ++c) a += pv[c] * v_s[c * hd + d];
        acc[k] = a;
      }
    }
  }
  __syncthreads();
  // Sinks (FinishSoftmax): each vector's factor and lse, computed once into c_s and m_s.
  for (int v = tid; v < vecs; v += kThreads) {
    float factor = 1.0f / l_s[v], lse_v = m_s[v] + logf(l_s[v]);
    if (p.sinks != nullptr) {
      const float sink = p.sinks[g * group + v % group];
      const float m = fmaxf(m_s[v], sink);
      const float corr = expf(m_s[v] - m);
      const float total = l_s[v] * corr + expf(sink - m);
      factor = corr / total;
      lse_v = m + logf(total);
    }
    c_s[v] = factor;
    m_s[v] = lse_v;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kTileAcc; ++k) {
    const int e = tid + k * kThreads;
    if (e < elems) {
      const int v = e / hd, d = e % hd;
      const int r = v / group, h = v % group;
      out[static_cast<int64_t>(first + r) * out_stride + static_cast<int64_t>(g * group + h) * hd + d] = acc[k] * c_s[v];
    }
  }
  if (lse != nullptr) {
    for (int v = tid; v < vecs; v += kThreads) {
      const int r = v / group, h = v % group;
      lse[static_cast<int64_t>(first + r) * p.num_heads + g * group + h] = m_s[v];
    }
  }
}

constexpr int kMassSlotsPerCta = 32;

// One warp per slot i of (s, g): K row dequantized once, then every (row, head) that sees it.
template <int kElems>
__global__ void __launch_bounds__(kThreads) MassKernel(Params p, const float* lse, float* mass, int64_t mass_stride) {
  const int s = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int hd = p.layout.head_dim, bs = p.layout.block_size;
  const int first = p.seqs.seq_starts[s];
  const int n_s = p.seqs.seq_starts[s + 1] - first;
  const int kv_len = p.seqs.kv_lens[s];
  const int begin = static_cast<int>(blockIdx.z) * kMassSlotsPerCta;
  const int end = min(kv_len, begin + kMassSlotsPerCta);
  const int32_t* table = p.seqs.block_tables + p.seqs.block_table_offsets[s];
  for (int i = begin + warp; i < end; i += kWarps) {
    const int64_t block = table[i / bs];
    const int off = i % bs;
    const Run kr = RunOf(p, block, 0, g);
    const float ks = KvRowScale(p.geo, 0, kr.scales, off);
    float k[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      k[e] = d < hd ? Load(p, 0, kr, off, d, ks) : 0.0f;
    }
    // Row j (0-based in s) sees slots [0, kv_len - n_s + j], from its window's start.
    const int j0 = max(0, i - (kv_len - n_s));
    const int j1 = p.window > 0 ? min(n_s, i + p.window - (kv_len - n_s)) : n_s;
    float total = 0.0f;
    for (int j = j0; j < j1; ++j) {
      const int64_t row = first + j;
      for (int h = 0; h < p.group; ++h) {
        const int head = g * p.group + h;
        const float* qh = p.q + row * p.q_stride + static_cast<int64_t>(head) * hd;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kElems; ++e) {
          const int d = e * 32 + lane;
          dot += d < hd ? qh[d] * k[e] : 0.0f;
        }
        dot = WarpSum(dot);
        total += expf(detail::Softcap(p, dot * p.scale) - lse[row * p.num_heads + head]);
      }
    }
    if (lane == 0) mass[(static_cast<int64_t>(s) * p.layout.num_kv_heads + g) * mass_stride + i] = total;
  }
}

int NumSplits(const DevicePagedSeqs& seqs, int split_tokens) {
  return split_tokens > 0 ? (seqs.max_kv_len + split_tokens - 1) / split_tokens : 0;
}

// Rows the split-KV kernel runs: every row, or the listed ones when the step is tiled.
int SplitRowCount(const DevicePagedSeqs& seqs) { return seqs.tiles != nullptr ? seqs.num_split_rows : seqs.num_rows; }

// Calls f(std::integral_constant<int, kElems>) for kElems = ceil(head_dim / 32) in [1, 8];
// false for head dims outside that range.
template <typename F>
bool DispatchElems(int head_dim, F&& f) {
  switch ((head_dim + 31) / 32) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 5: f(std::integral_constant<int, 5>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 7: f(std::integral_constant<int, 7>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}

// The shape checks both entry points share.
bool ValidShape(const cache::KvLayout& layout, int num_heads, const float* layer_scales) {
  return layout.head_dim >= 1 && layout.head_dim <= kMaxAttentionHeadDim && layout.num_kv_heads >= 1 &&
         num_heads % layout.num_kv_heads == 0 && num_heads / layout.num_kv_heads <= kMaxAttentionGroup &&
         (!layout.has_scales() || layer_scales != nullptr);
}

Params MakeParams(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                  const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                  const DeviceAttentionVariant& variant) {
  Params p{};
  p.window = variant.window;
  p.softcap = variant.softcap;
  p.sinks = variant.sinks;
  p.layout = layout;
  p.geo = MakeKvGeometry(layout);
  p.data = layer_data;
  p.scales = layer_scales;
  p.seqs = seqs;
  p.q = q;
  p.q_stride = q_stride;
  p.num_heads = num_heads;
  p.group = num_heads / layout.num_kv_heads;
  p.scale = scale;
  return p;
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const cache::KvLayout& layout, int num_heads, const DevicePagedSeqs& seqs,
                                    int split_tokens) {
  const size_t slots = static_cast<size_t>(SplitRowCount(seqs)) * static_cast<size_t>(num_heads) *
                       static_cast<size_t>(NumSplits(seqs, split_tokens));
  return slots * (static_cast<size_t>(layout.head_dim) + 2) * sizeof(float);
}

int PagedAttention(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                   const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                   float* out, int64_t out_stride, float* lse, void* workspace, size_t workspace_bytes,
                   int split_tokens, void* stream, const DeviceAttentionVariant& variant) {
  if (seqs.num_rows == 0) return cudaSuccess;
  if (variant.window < 0 || variant.softcap < 0.0f) return cudaErrorInvalidValue;
  if (!ValidShape(layout, num_heads, layer_scales) || split_tokens < 1 || seqs.max_kv_len < 1 ||
      workspace_bytes < PagedAttentionWorkspaceBytes(layout, num_heads, seqs, split_tokens)) {
    return cudaErrorInvalidValue;
  }
  const int group = num_heads / layout.num_kv_heads;
  const bool tiled = seqs.tiles != nullptr;
  if (tiled && (seqs.num_split_rows < 0 || seqs.num_tiles < 0 || seqs.tile_rows < 1 ||
                (seqs.num_split_rows > 0 && seqs.split_rows == nullptr) ||
                static_cast<int64_t>(seqs.tile_rows) * group * layout.head_dim > kMaxPrefillTileFloats)) {
    return cudaErrorInvalidValue;
  }
  Params p = MakeParams(layout, layer_data, layer_scales, seqs, q, q_stride, num_heads, scale, variant);
  p.split_tokens = split_tokens;
  p.num_splits = NumSplits(seqs, split_tokens);
  p.split_rows = tiled ? seqs.split_rows : nullptr;
  p.num_split_rows = SplitRowCount(seqs);
  const size_t slots = static_cast<size_t>(p.num_split_rows) * static_cast<size_t>(num_heads) *
                       static_cast<size_t>(p.num_splits);
  p.ws_m = static_cast<float*>(workspace);
  p.ws_l = p.ws_m + slots;
  p.ws_acc = p.ws_l + slots;
  auto st = static_cast<cudaStream_t>(stream);
  if (p.num_split_rows > 0) {
    const dim3 grid(static_cast<unsigned>(p.num_split_rows), static_cast<unsigned>(layout.num_kv_heads),
                    static_cast<unsigned>(p.num_splits));
    // The vectorised kernel where it applies (K and V in one non-int4 dtype, head_dim 64, 128
    // or 256, group 1, 2, 4 or 8: every common serving shape), else the general one.
    p.out = out;
    p.out_stride = out_stride;
    p.lse = lse;
    const bool plain = variant.softcap == 0.0f && variant.sinks == nullptr;
    const bool vec = plain && detail::LaunchVecSplitKernel(p, grid, st);
    if (!vec) {
      const bool ok = DispatchElems(layout.head_dim, [&](auto elems) {
        SplitKernel<decltype(elems)::value><<<grid, kThreads, 0, st>>>(p);
      });
      if (!ok) return cudaErrorInvalidValue;
    }
    if (!vec || p.num_splits > 1) {
      const dim3 cgrid(static_cast<unsigned>(p.num_split_rows), static_cast<unsigned>(num_heads));
      CombineKernel<<<cgrid, 128, 0, st>>>(p, out, out_stride, lse);
    }
  }
  if (tiled && seqs.num_tiles > 0) {
    const size_t smem = TileSharedBytes(seqs.tile_rows * group, layout.head_dim);
    const int err = static_cast<int>(
        cudaFuncSetAttribute(TileKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    if (err != cudaSuccess) return err;
    const dim3 grid(static_cast<unsigned>(seqs.num_tiles), static_cast<unsigned>(layout.num_kv_heads));
    TileKernel<<<grid, kThreads, smem, st>>>(p, out, out_stride, lse);
  }
  return static_cast<int>(cudaGetLastError());
}

int AttentionMass(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                  const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                  const float* lse, float* mass, int64_t mass_stride, void* stream,
                  const DeviceAttentionVariant& variant) {
  if (seqs.num_seqs == 0 || seqs.max_kv_len == 0) return cudaSuccess;
  if (!ValidShape(layout, num_heads, layer_scales) || mass_stride < seqs.max_kv_len || lse == nullptr) {
    return cudaErrorInvalidValue;
  }
  const Params p = MakeParams(layout, layer_data, layer_scales, seqs, q, q_stride, num_heads, scale, variant);
  const dim3 grid(static_cast<unsigned>(seqs.num_seqs), static_cast<unsigned>(layout.num_kv_heads),
                  static_cast<unsigned>((seqs.max_kv_len + kMassSlotsPerCta - 1) / kMassSlotsPerCta));
  const bool ok = DispatchElems(layout.head_dim, [&](auto elems) {
    MassKernel<decltype(elems)::value><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, lse, mass,
                                                                                               mass_stride);
  });
  if (!ok) return cudaErrorInvalidValue;
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
