#include "kernels/cuda/paged_attention.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

namespace kvserve::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

struct Params {
  cache::KvLayout layout;
  const std::byte* data;
  const float* scales;
  DevicePagedSeqs seqs;
  const float* q;
  int64_t q_stride;
  int num_heads;
  int group;
  float scale;
  int split_tokens;
  int num_splits;
  float* ws_m;    // [rows][heads][splits]
  float* ws_l;    // [rows][heads][splits]
  float* ws_acc;  // [rows][heads][splits][head_dim]
};

// Exact decoders, bit-for-bit those of kernels/cpu/kv_quant.cc.
__device__ __forceinline__ float Bf16Bits(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float Fp8E4M3(uint8_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  float v;
  if (e == 0) {
    v = ldexpf(static_cast<float>(m), -9);
  } else if (e == 15 && m == 7) {
    v = __int_as_float(0x7fc00000);
  } else {
    v = ldexpf(static_cast<float>(8 + m), e - 10);
  }
  return (b & 0x80) ? -v : v;
}

// Element `i` of the row starting at element offset `base`, dequantized (scale: the row's).
__device__ __forceinline__ float Load(const Params& p, size_t base, int i, float row_scale) {
  switch (p.layout.dtype) {
    case config::KvDtype::kFp32:
      return reinterpret_cast<const float*>(p.data)[base + i];
    case config::KvDtype::kFp16:
      return __half2float(reinterpret_cast<const __half*>(p.data)[base + i]);
    case config::KvDtype::kBf16:
      return Bf16Bits(reinterpret_cast<const uint16_t*>(p.data)[base + i]);
    case config::KvDtype::kFp8E4M3:
      return Fp8E4M3(reinterpret_cast<const uint8_t*>(p.data)[base + i]) * row_scale;
    case config::KvDtype::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(p.data)[base + i]) * row_scale;
  }
  return 0.0f;
}

// cache::KvLayout's addressing, restated for device code (the layout header stays plain C++).
__device__ __forceinline__ size_t RunIndex(const cache::KvLayout& l, int64_t block, int kv, int head) {
  return (static_cast<size_t>(block) * 2 + static_cast<size_t>(kv)) * static_cast<size_t>(l.num_kv_heads) +
         static_cast<size_t>(head);
}
__device__ __forceinline__ size_t ElemOffset(const cache::KvLayout& l, int64_t block, int kv, int head, int off) {
  return RunIndex(l, block, kv, head) * static_cast<size_t>(l.block_size) * static_cast<size_t>(l.head_dim) +
         static_cast<size_t>(off) * static_cast<size_t>(l.head_dim);
}
__device__ __forceinline__ size_t ScaleOffset(const cache::KvLayout& l, int64_t block, int kv, int head, int off) {
  return RunIndex(l, block, kv, head) * static_cast<size_t>(l.block_size) + static_cast<size_t>(off);
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// kElems = ceil(head_dim / 32): lane l owns elements l, l + 32, ... (coalesced per warp).
template <int kElems>
__global__ void __launch_bounds__(kThreads) SplitKernel(Params p) {
  const int row = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int hd = p.layout.head_dim, group = p.group;
  const int s = p.seqs.row_seq[row];
  const int start = p.seqs.seq_starts[s];
  const int n = p.seqs.seq_starts[s + 1] - start;
  const int attend = p.seqs.kv_lens[s] - n + (row - start) + 1;
  const int begin = split * p.split_tokens;
  const int end = min(attend, begin + p.split_tokens);

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
  const bool scaled = p.layout.dtype == config::KvDtype::kFp8E4M3 || p.layout.dtype == config::KvDtype::kInt8;
  for (int i = begin + warp; i < end; i += kWarps) {
    const int64_t block = table[i / bs];
    const int off = i % bs;
    const size_t kb = ElemOffset(p.layout, block, 0, g, off), vb = ElemOffset(p.layout, block, 1, g, off);
    const float ks = scaled ? p.scales[ScaleOffset(p.layout, block, 0, g, off)] : 1.0f;
    const float vs = scaled ? p.scales[ScaleOffset(p.layout, block, 1, g, off)] : 1.0f;
    float k[kElems], v[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      k[e] = d < hd ? Load(p, kb, d, ks) : 0.0f;
      v[e] = d < hd ? Load(p, vb, d, vs) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kMaxAttentionGroup; ++h) {
      if (h >= group) break;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kElems; ++e) dot += qr[h][e] * k[e];
      const float score = WarpSum(dot) * p.scale;
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
    const int64_t slot = (static_cast<int64_t>(row) * p.num_heads + g * group + h) * p.num_splits + split;
    p.ws_acc[slot * hd + d] = a;
    if (d == 0) {
      p.ws_m[slot] = mx;
      p.ws_l[slot] = sum;
    }
  }
}

__global__ void CombineKernel(Params p, float* out, int64_t out_stride, float* lse) {
  const int row = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const int hd = p.layout.head_dim;
  const int64_t base = (static_cast<int64_t>(row) * p.num_heads + head) * p.num_splits;
  float mx = -INFINITY;
  for (int sp = 0; sp < p.num_splits; ++sp) mx = fmaxf(mx, p.ws_m[base + sp]);
  float sum = 0.0f;
  for (int sp = 0; sp < p.num_splits; ++sp) {
    if (p.ws_m[base + sp] != -INFINITY) sum += p.ws_l[base + sp] * expf(p.ws_m[base + sp] - mx);
  }
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += static_cast<int>(blockDim.x)) {
    float a = 0.0f;
    for (int sp = 0; sp < p.num_splits; ++sp) {
      if (p.ws_m[base + sp] != -INFINITY) a += p.ws_acc[(base + sp) * hd + d] * expf(p.ws_m[base + sp] - mx);
    }
    out[static_cast<int64_t>(row) * out_stride + static_cast<int64_t>(head) * hd + d] = a / sum;
  }
  if (lse != nullptr && threadIdx.x == 0) lse[static_cast<int64_t>(row) * p.num_heads + head] = mx + logf(sum);
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
  const bool scaled = p.layout.dtype == config::KvDtype::kFp8E4M3 || p.layout.dtype == config::KvDtype::kInt8;
  for (int i = begin + warp; i < end; i += kWarps) {
    const int64_t block = table[i / bs];
    const int off = i % bs;
    const size_t kb = ElemOffset(p.layout, block, 0, g, off);
    const float ks = scaled ? p.scales[ScaleOffset(p.layout, block, 0, g, off)] : 1.0f;
    float k[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int d = e * 32 + lane;
      k[e] = d < hd ? Load(p, kb, d, ks) : 0.0f;
    }
    // Row j (0-based in s) sees slots [0, kv_len - n_s + j].
    const int j0 = max(0, i - (kv_len - n_s));
    float total = 0.0f;
    for (int j = j0; j < n_s; ++j) {
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
        total += expf(dot * p.scale - lse[row * p.num_heads + head]);
      }
    }
    if (lane == 0) mass[(static_cast<int64_t>(s) * p.layout.num_kv_heads + g) * mass_stride + i] = total;
  }
}

template <int kElems>
void LaunchMass(const Params& p, const float* lse, float* mass, int64_t mass_stride, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(p.seqs.num_seqs), static_cast<unsigned>(p.layout.num_kv_heads),
            static_cast<unsigned>((p.seqs.max_kv_len + kMassSlotsPerCta - 1) / kMassSlotsPerCta));
  MassKernel<kElems><<<grid, kThreads, 0, stream>>>(p, lse, mass, mass_stride);
}

int NumSplits(const DevicePagedSeqs& seqs, int split_tokens) {
  return split_tokens > 0 ? (seqs.max_kv_len + split_tokens - 1) / split_tokens : 0;
}

template <int kElems>
void LaunchSplit(const Params& p, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(p.seqs.num_rows), static_cast<unsigned>(p.layout.num_kv_heads),
            static_cast<unsigned>(p.num_splits));
  SplitKernel<kElems><<<grid, kThreads, 0, stream>>>(p);
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const cache::KvLayout& layout, int num_heads, const DevicePagedSeqs& seqs,
                                    int split_tokens) {
  const size_t slots = static_cast<size_t>(seqs.num_rows) * static_cast<size_t>(num_heads) *
                       static_cast<size_t>(NumSplits(seqs, split_tokens));
  return slots * (static_cast<size_t>(layout.head_dim) + 2) * sizeof(float);
}

int PagedAttention(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                   const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                   float* out, int64_t out_stride, float* lse, void* workspace, size_t workspace_bytes,
                   int split_tokens, void* stream) {
  if (seqs.num_rows == 0) return cudaSuccess;
  if (layout.head_dim < 1 || layout.head_dim > kMaxAttentionHeadDim || layout.num_kv_heads < 1 ||
      num_heads % layout.num_kv_heads != 0 || num_heads / layout.num_kv_heads > kMaxAttentionGroup ||
      split_tokens < 1 || seqs.max_kv_len < 1 || (layout.has_scales() && layer_scales == nullptr) ||
      workspace_bytes < PagedAttentionWorkspaceBytes(layout, num_heads, seqs, split_tokens)) {
    return cudaErrorInvalidValue;
  }
  Params p{};
  p.layout = layout;
  p.data = layer_data;
  p.scales = layer_scales;
  p.seqs = seqs;
  p.q = q;
  p.q_stride = q_stride;
  p.num_heads = num_heads;
  p.group = num_heads / layout.num_kv_heads;
  p.scale = scale;
  p.split_tokens = split_tokens;
  p.num_splits = NumSplits(seqs, split_tokens);
  const size_t slots = static_cast<size_t>(seqs.num_rows) * static_cast<size_t>(num_heads) *
                       static_cast<size_t>(p.num_splits);
  p.ws_m = static_cast<float*>(workspace);
  p.ws_l = p.ws_m + slots;
  p.ws_acc = p.ws_l + slots;
  auto st = static_cast<cudaStream_t>(stream);
  switch ((layout.head_dim + 31) / 32) {
    case 1: LaunchSplit<1>(p, st); break;
    case 2: LaunchSplit<2>(p, st); break;
    case 3: LaunchSplit<3>(p, st); break;
    case 4: LaunchSplit<4>(p, st); break;
    case 5: LaunchSplit<5>(p, st); break;
    case 6: LaunchSplit<6>(p, st); break;
    case 7: LaunchSplit<7>(p, st); break;
    case 8: LaunchSplit<8>(p, st); break;
    default: return cudaErrorInvalidValue;
  }
  dim3 grid(static_cast<unsigned>(seqs.num_rows), static_cast<unsigned>(num_heads));
  CombineKernel<<<grid, 128, 0, st>>>(p, out, out_stride, lse);
  return static_cast<int>(cudaGetLastError());
}

int AttentionMass(const cache::KvLayout& layout, const std::byte* layer_data, const float* layer_scales,
                  const DevicePagedSeqs& seqs, const float* q, int64_t q_stride, int num_heads, float scale,
                  const float* lse, float* mass, int64_t mass_stride, void* stream) {
  if (seqs.num_seqs == 0 || seqs.max_kv_len == 0) return cudaSuccess;
  if (layout.head_dim < 1 || layout.head_dim > kMaxAttentionHeadDim || layout.num_kv_heads < 1 ||
      num_heads % layout.num_kv_heads != 0 || num_heads / layout.num_kv_heads > kMaxAttentionGroup ||
      mass_stride < seqs.max_kv_len || lse == nullptr || (layout.has_scales() && layer_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  Params p{};
  p.layout = layout;
  p.data = layer_data;
  p.scales = layer_scales;
  p.seqs = seqs;
  p.q = q;
  p.q_stride = q_stride;
  p.num_heads = num_heads;
  p.group = num_heads / layout.num_kv_heads;
  p.scale = scale;
  auto st = static_cast<cudaStream_t>(stream);
  switch ((layout.head_dim + 31) / 32) {
    case 1: LaunchMass<1>(p, lse, mass, mass_stride, st); break;
    case 2: LaunchMass<2>(p, lse, mass, mass_stride, st); break;
    case 3: LaunchMass<3>(p, lse, mass, mass_stride, st); break;
    case 4: LaunchMass<4>(p, lse, mass, mass_stride, st); break;
    case 5: LaunchMass<5>(p, lse, mass, mass_stride, st); break;
    case 6: LaunchMass<6>(p, lse, mass, mass_stride, st); break;
    case 7: LaunchMass<7>(p, lse, mass, mass_stride, st); break;
    case 8: LaunchMass<8>(p, lse, mass, mass_stride, st); break;
    default: return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
