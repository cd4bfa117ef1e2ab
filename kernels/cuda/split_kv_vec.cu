// Split-KV decode attention, vectorised: pass 1 of PagedAttention's split-KV path for the
// shapes serving runs almost always (K and V in one dtype of fp32, fp16, bf16, fp8_e4m3 or
// int8; head_dim 64, 128 or 256; GQA group 1, 2, 4 or 8). The general kernel in
// paged_attention.cu reads one element per lane and walks one slot per warp at a time; on an
// H200 at batch 64 x 8K context it reached 5% of copy bandwidth (docs/benchmarks.md): far too
// few bytes in flight. Here:
//
//   lanes     a slot's K (or V) row is read by kLanes = head_dim / 8 lanes, 8 elements each
//             (16 bytes of bf16/fp16, 32 of fp32, 8 of fp8/int8), so a warp runs 32 / kLanes
//             independent streams of slots; 4 warps per CTA.
//   a step    each stream takes kUnroll slots: their K and V rows are all fetched first (bytes
//             in flight), then q·k for every head of the group (reduced over the row's lanes by
//             xor shuffles), one online-softmax update per head for those slots together, and
//             the V accumulation. Scores live in the log2 domain (q is pre-scaled by
//             scale * log2 e), so each probability is one exp2.
//   merge     streams of a warp by xor shuffles, warps through shared memory; the CTA writes
//             the partial (max in natural log, sum, accumulator) the general kernel writes, so
//             pass 2 (CombineKernel) is shared; with a single split it writes the output and
//             lse directly (CombineKernel's arithmetic) and pass 2 is skipped.
//
// Per-row scales (fp8, int8) multiply the dot product and the probability rather than every
// element. Results equal the general kernel's up to fp32 summation order (fixed, so still
// deterministic); the gpu tests hold both paths to the CPU kernel with the same tolerance.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/split_kv_params.cuh"

namespace kvserve::kernels::cuda::detail {
namespace {

constexpr int kVec = 8;  // elements of a row per lane
// Slots per stream per step: more bytes in flight, paid in registers (K and V raw per slot):
// 4 up to group 4 (about 150 registers at group 4), 2 at group 8 (about 215).
template <int kGroup>
constexpr int kUnrollFor = kGroup <= 4 ? 4 : 2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A codec fetches the raw bytes of a lane's 8 elements (one load where it can) and decodes
// them exactly as LoadKvRunElem does, before any per-row scale. CodecBase holds the fetch of
// the ones whose 8 codes fit one vector load.
template <config::KvDtype D, bool kScaledCodes, typename RawT>
struct CodecBase {
  static constexpr config::KvDtype kDtype = D;
  static constexpr bool kScaled = kScaledCodes;
  using Raw = RawT;
  __device__ __forceinline__ static Raw Fetch(const std::byte* p) { return *reinterpret_cast<const Raw*>(p); }
};

struct Fp32Codec {
  static constexpr config::KvDtype kDtype = config::KvDtype::kFp32;
  static constexpr bool kScaled = false;
  struct Raw {
    float4 a, b;
  };
  __device__ __forceinline__ static Raw Fetch(const std::byte* p) {
    const auto* f = reinterpret_cast<const float4*>(p);
    return {f[0], f[1]};
  }
  __device__ __forceinline__ static void Decode(const Raw& r, float (&x)[kVec]) {
    x[0] = r.a.x, x[1] = r.a.y, x[2] = r.a.z, x[3] = r.a.w;
    x[4] = r.b.x, x[5] = r.b.y, x[6] = r.b.z, x[7] = r.b.w;
  }
};

struct Bf16Codec : CodecBase<config::KvDtype::kBf16, false, uint4> {
  __device__ __forceinline__ static void Decode(const Raw& r, float (&x)[kVec]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};

struct Fp16Codec : CodecBase<config::KvDtype::kFp16, false, uint4> {
  __device__ __forceinline__ static void Decode(const Raw& r, float (&x)[kVec]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
      x[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
};

struct Int8Codec : CodecBase<config::KvDtype::kInt8, true, uint2> {
  __device__ __forceinline__ static void Decode(const Raw& r, float (&x)[kVec]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = static_cast<float>(static_cast<int8_t>((r.x >> (8 * i)) & 0xffu));
      x[4 + i] = static_cast<float>(static_cast<int8_t>((r.y >> (8 * i)) & 0xffu));
    }
  }
};

// E4M3 -> fp16 is exact (every E4M3 value, NaN included, is an fp16 value): the hardware
// pair conversion, then fp16 -> fp32.
struct Fp8E4M3Codec : CodecBase<config::KvDtype::kFp8E4M3, true, uint2> {
  __device__ __forceinline__ static void Decode(const Raw& r, float (&x)[kVec]) {
    const uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((w[i / 2] >> (16 * (i % 2))) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
};

template <class Codec>
constexpr int kCodeBytes = Codec::kDtype == config::KvDtype::kFp32   ? 4
                           : Codec::kDtype == config::KvDtype::kBf16 ? 2
                           : Codec::kDtype == config::KvDtype::kFp16 ? 2
                                                                     : 1;

template <class Codec, int kHd, int kGroup>
__global__ void __launch_bounds__(kThreads) VecSplitKernel(Params p) {
  constexpr int kLanes = kHd / kVec;     // lanes per row
  constexpr int kStreams = 32 / kLanes;  // streams per warp
  constexpr int kCtaStreams = kWarps * kStreams;
  constexpr int kRowBytes = kHd * kCodeBytes<Codec>;
  constexpr int kUnroll = kUnrollFor<kGroup>;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "head_dim / 8 lanes per row");

  const int row_index = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y);
  const int split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane / kLanes, sl = lane % kLanes;
  const int stream = warp * kStreams + sub;
  const SplitSlots slots = SplitSlotsOf(p, row_index, split);
  const int row = slots.row, s = slots.seq, begin = slots.begin, end = slots.end;

  // This lane's 8 elements of every head of the group, pre-scaled into the log2 domain.
  float q[kGroup][kVec];
  const float q_scale = p.scale * kLog2e;
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    const float* qh = p.q + static_cast<int64_t>(row) * p.q_stride + static_cast<int64_t>(g * kGroup + h) * kHd + sl * kVec;
#pragma unroll
    for (int e = 0; e < kVec; ++e) q[h][e] = qh[e] * q_scale;
  }
  float m[kGroup], l[kGroup], acc[kGroup][kVec];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[h][e] = 0.0f;
  }

  const KvGeometry& geo = p.geo;
  const int bs_shift = __ffs(p.layout.block_size) - 1;  // block_size is a power of two (launcher)
  const int bs_mask = p.layout.block_size - 1;
  const int32_t* table = p.seqs.block_tables + p.seqs.block_table_offsets[s];
  const int64_t k_run = g * geo.run_bytes[0] + sl * kVec * kCodeBytes<Codec>;
  const int64_t v_run = geo.num_kv_heads * geo.run_bytes[0] + g * geo.run_bytes[1] + sl * kVec * kCodeBytes<Codec>;
  const int64_t k_scales = g * geo.run_scales[0];
  const int64_t v_scales = geo.num_kv_heads * geo.run_scales[0] + g * geo.run_scales[1];

  for (int base = begin; base < end; base += kCtaStreams * kUnroll) {
    typename Codec::Raw kraw[kUnroll], vraw[kUnroll];
    float ks[kUnroll], vs[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int slot = base + u * kCtaStreams + stream;
      valid[u] = slot < end;
      ks[u] = vs[u] = 1.0f;
      if (valid[u]) {
        const int64_t block = table[slot >> bs_shift];
        const int off = slot & bs_mask;
        const std::byte* blk = p.data + block * geo.block_data_bytes + static_cast<int64_t>(off) * kRowBytes;
        kraw[u] = Codec::Fetch(blk + k_run);
        vraw[u] = Codec::Fetch(blk + v_run);
        if constexpr (Codec::kScaled) {
          const float* sc = p.scales + block * geo.block_scales + off;
          ks[u] = sc[k_scales];
          vs[u] = sc[v_scales];
        }
      } else {
        kraw[u] = {};
        vraw[u] = {};
      }
    }
    float sc[kUnroll][kGroup];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[kVec];
      Codec::Decode(kraw[u], k);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(q[h][e], k[e], dot);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        sc[u][h] = valid[u] ? dot * ks[u] : -INFINITY;
      }
    }
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) Codec::Decode(vraw[u], v[u]);
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, sc[u][h]);
      if (mx == -INFINITY) continue;  // no slot of this stream yet
      const float corr = exp2f(m[h] - mx);  // 0 when m was -inf
      l[h] *= corr;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[h][e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float pr = exp2f(sc[u][h] - mx);  // 0 for invalid slots
        l[h] += pr;
        const float pv = pr * vs[u];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[h][e] = fmaf(pv, v[u][e], acc[h][e]);
      }
      m[h] = mx;
    }
  }

  // Merge the warp's streams (lanes sl of each stream hold the same elements).
#pragma unroll
  for (int o = kLanes; o < 32; o <<= 1) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], o);
      const float lo = __shfl_xor_sync(0xffffffffu, l[h], o);
      const float mx = fmaxf(m[h], mo);
      const float fa = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mx);
      const float fb = mo == -INFINITY ? 0.0f : exp2f(mo - mx);
      l[h] = l[h] * fa + lo * fb;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[h][e], o);
        acc[h][e] = acc[h][e] * fa + ao * fb;
      }
      m[h] = mx;
    }
  }

  __shared__ float m_s[kWarps][kGroup];
  __shared__ float l_s[kWarps][kGroup];
  __shared__ float acc_s[kWarps][kGroup][kHd];
  if (sub == 0) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      if (sl == 0) {
        m_s[warp][h] = m[h];
        l_s[warp][h] = l[h];
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc_s[warp][h][sl * kVec + e] = acc[h][e];
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kGroup * kHd; i += kThreads) {
    const int h = i / kHd, d = i % kHd;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][h]);
    float sum = 0.0f, a = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        if (m_s[w][h] == -INFINITY) continue;
        const float f = exp2f(m_s[w][h] - mx);
        sum += l_s[w][h] * f;
        a += acc_s[w][h][d] * f;
      }
    }
    const float m_nat = mx == -INFINITY ? mx : mx * kLn2;
    if (p.num_splits == 1) {
      // CombineKernel's arithmetic for one split (its weight exp(0) is exactly 1).
      const int head = g * kGroup + h;
      p.out[static_cast<int64_t>(row) * p.out_stride + static_cast<int64_t>(head) * kHd + d] = a / sum;
      if (d == 0 && p.lse != nullptr) p.lse[static_cast<int64_t>(row) * p.num_heads + head] = m_nat + logf(sum);
      continue;
    }
    const int64_t slot = (static_cast<int64_t>(row_index) * p.num_heads + g * kGroup + h) * p.num_splits + split;
    p.ws_acc[slot * kHd + d] = a;
    if (d == 0) {
      p.ws_m[slot] = m_nat;
      p.ws_l[slot] = sum;
    }
  }
}

template <class Codec>
constexpr int64_t kFetchAlign = kVec * kCodeBytes<Codec> < 16 ? kVec * kCodeBytes<Codec> : 16;

// Every fetch is one aligned load: the row, run and block strides must be multiples of the
// lane's fetch (the pool base is checked at launch; cudaMalloc aligns it to 256 bytes).
bool ShapeCovered(const KvGeometry& geo, int block_size, int group, int64_t align) {
  const int hd = geo.head_dim;
  return geo.dtype[0] == geo.dtype[1] && geo.dtype[0] != config::KvDtype::kInt4 &&
         (hd == 64 || hd == 128 || hd == 256) && (group == 1 || group == 2 || group == 4 || group == 8) &&
         block_size >= 1 && (block_size & (block_size - 1)) == 0 && geo.block_data_bytes % align == 0 &&
         geo.run_bytes[0] % align == 0 && geo.run_bytes[1] % align == 0;
}

template <class Codec>
bool LaunchFor(const Params& p, dim3 grid, cudaStream_t stream) {
  if (!ShapeCovered(p.geo, p.layout.block_size, p.group, kFetchAlign<Codec>) ||
      reinterpret_cast<uintptr_t>(p.data) % kFetchAlign<Codec> != 0) {
    return false;
  }
  auto with_hd = [&](auto hd) {
    auto with_group = [&](auto group) {
      VecSplitKernel<Codec, decltype(hd)::value, decltype(group)::value><<<grid, kThreads, 0, stream>>>(p);
      return true;
    };
    switch (p.group) {
      case 1: return with_group(std::integral_constant<int, 1>{});
      case 2: return with_group(std::integral_constant<int, 2>{});
      case 4: return with_group(std::integral_constant<int, 4>{});
      case 8: return with_group(std::integral_constant<int, 8>{});
      default: return false;
    }
  };
  switch (p.layout.head_dim) {
    case 64: return with_hd(std::integral_constant<int, 64>{});
    case 128: return with_hd(std::integral_constant<int, 128>{});
    case 256: return with_hd(std::integral_constant<int, 256>{});
    default: return false;
  }
}

// The fetch alignment of a dtype's codec (0: no codec).
int64_t FetchAlignOf(config::KvDtype d) {
  switch (d) {
    case config::KvDtype::kFp32: return kFetchAlign<Fp32Codec>;
    case config::KvDtype::kFp16: return kFetchAlign<Fp16Codec>;
    case config::KvDtype::kBf16: return kFetchAlign<Bf16Codec>;
    case config::KvDtype::kFp8E4M3: return kFetchAlign<Fp8E4M3Codec>;
    case config::KvDtype::kInt8: return kFetchAlign<Int8Codec>;
    case config::KvDtype::kInt4: return 0;
  }
  return 0;
}

}  // namespace

bool LaunchVecSplitKernel(const Params& p, dim3 grid, cudaStream_t stream) {
  if (p.geo.dtype[0] != p.geo.dtype[1]) return false;
  switch (p.geo.dtype[0]) {
    case config::KvDtype::kFp32: return LaunchFor<Fp32Codec>(p, grid, stream);
    case config::KvDtype::kFp16: return LaunchFor<Fp16Codec>(p, grid, stream);
    case config::KvDtype::kBf16: return LaunchFor<Bf16Codec>(p, grid, stream);
    case config::KvDtype::kFp8E4M3: return LaunchFor<Fp8E4M3Codec>(p, grid, stream);
    case config::KvDtype::kInt8: return LaunchFor<Int8Codec>(p, grid, stream);
    case config::KvDtype::kInt4: return false;
  }
  return false;
}

}  // namespace kvserve::kernels::cuda::detail

namespace kvserve::kernels::cuda {

bool VecSplitCovers(const cache::KvLayout& layout, int num_heads) {
  if (layout.num_kv_heads < 1 || num_heads % layout.num_kv_heads != 0) return false;
  const KvGeometry geo = MakeKvGeometry(layout);
  const int64_t align = detail::FetchAlignOf(geo.dtype[0]);
  return align > 0 && detail::ShapeCovered(geo, layout.block_size, num_heads / layout.num_kv_heads, align);
}

}  // namespace kvserve::kernels::cuda
