// KV element codes in device code: the same bit-level algorithms as kernels/cpu/kv_quant.cc
// (restated, not shared: that file is host-only), so codes written on the device are
// bit-identical to the CPU's for every finite input, and decoded exactly as the CPU decodes
// them (every kernel that reads KV: attention, mass, compression scoring, compaction). Every
// float operation that takes part in rounding is an explicit _rn intrinsic, so nvcc cannot
// contract it into an FMA. Every layout: K and V each in its own dtype (KvGeometry), int4 keys
// per channel per block and int4 values per token per group (cache/kv_layout.h).
// Included only by .cu files of kernels/cuda.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"

namespace kvserve::kernels::cuda {

inline constexpr float kFp8E4M3MaxCode = 448.0f;
inline constexpr float kInt8MaxCode = 127.0f;

// cache::KvLayout's byte geometry (its run_* helpers), precomputed on the host so device code
// calls no KvLayout member: valid for every layout, split K/V dtypes and int4 included.
//   data[layer]:   [block] x ( K: [head][block_size][row_bytes[0]]  V: [head][block_size][row_bytes[1]] )
//   scales[layer]: [block] x ( K: [head][run_scales[0]]             V: [head][run_scales[1]] )
struct KvGeometry {
  config::KvDtype dtype[2] = {config::KvDtype::kFp32, config::KvDtype::kFp32};  // K, V
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int int4_group = 32;  // int4 V: elements per (step, min) group
  int v_groups = 1;     // int4 V: groups per row
  int64_t row_bytes[2] = {0, 0};
  int64_t run_bytes[2] = {0, 0};
  int64_t run_scales[2] = {0, 0};  // scale slots per (block, head) run
  int64_t block_data_bytes = 0;
  int64_t block_scales = 0;
};

inline KvGeometry MakeKvGeometry(const cache::KvLayout& l) {
  KvGeometry g;
  g.dtype[0] = l.k_dtype();
  g.dtype[1] = l.v_dtype();
  g.num_kv_heads = l.num_kv_heads;
  g.head_dim = l.head_dim;
  g.block_size = l.block_size;
  g.int4_group = l.int4_group;
  g.v_groups = l.v_groups();
  for (int kv = 0; kv < 2; ++kv) {
    g.row_bytes[kv] = static_cast<int64_t>(l.row_bytes(kv));
    g.run_bytes[kv] = static_cast<int64_t>(l.run_bytes(kv));
    g.run_scales[kv] = static_cast<int64_t>(l.run_scales(kv));
  }
  g.block_data_bytes = static_cast<int64_t>(l.block_data_bytes());
  g.block_scales = static_cast<int64_t>(l.block_scales());
  return g;
}

// Byte offset of the (block, kv, head) run inside data[layer] (KvLayout::run_byte_offset).
__host__ __device__ __forceinline__ int64_t KvRunByteOffset(const KvGeometry& g, int64_t block, int kv, int head) {
  return block * g.block_data_bytes + (kv == 0 ? 0 : g.num_kv_heads * g.run_bytes[0]) + head * g.run_bytes[kv];
}
// Index of the run's first scale inside scales[layer] (KvLayout::run_scale_offset).
__host__ __device__ __forceinline__ int64_t KvRunScaleOffset(const KvGeometry& g, int64_t block, int kv, int head) {
  return block * g.block_scales + (kv == 0 ? 0 : g.num_kv_heads * g.run_scales[0]) + head * g.run_scales[kv];
}

// IEEE binary16, round to nearest even, overflow to inf, NaN -> 0x7e00 (FloatToHalf).
__device__ __forceinline__ uint16_t FloatToHalfCode(float x) {
  uint32_t f = __float_as_uint(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t h;
  if (f >= 0x47800000u) {
    h = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (f < 0x38800000u) {
    h = __float_as_uint(__fadd_rn(__uint_as_float(f), 0.5f)) - 0x3f000000u;
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += 0xc8000fffu + mant_odd;
    h = f >> 13;
  }
  return static_cast<uint16_t>(h | sign);
}

// Top half of binary32, round to nearest even, NaN kept quiet (FloatToBf16).
__device__ __forceinline__ uint16_t FloatToBf16Code(float x) {
  const uint32_t f = __float_as_uint(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

// Stores of an fp32 result (float) or of its bf16 code (uint16_t: the value ToBf16 gives), so a
// bf16 GEMM's input is written by the kernel that makes it, without a ToBf16 pass. Shared by
// the element-wise kernels of llama_kernels.cu, gemma_kernels.cu and moe_kernels.cu.
__device__ __forceinline__ void StoreAs(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void StoreAs(uint16_t* p, int64_t i, float v) { p[i] = FloatToBf16Code(v); }

// OCP E4M3 "fn", round to nearest even, saturating at 448 (FloatToFp8E4M3).
__device__ __forceinline__ uint8_t FloatToFp8E4M3Code(float x) {
  uint32_t f = __float_as_uint(x);
  const uint32_t sign = (f >> 24) & 0x80u;
  f &= 0x7fffffffu;
  if (f > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (f >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);
  uint32_t code;
  if (f < 0x3c800000u) {
    code = __float_as_uint(__fadd_rn(__uint_as_float(f), 16384.0f)) - 0x46800000u;
  } else {
    const uint32_t mant_odd = (f >> 20) & 1u;
    f += 0x7ffffu + mant_odd;
    code = (f >> 20) - (120u << 3);
    code = code > 0x7eu ? 0x7eu : code;
  }
  return static_cast<uint8_t>(sign | code);
}

// Symmetric int8: round to nearest even (the CPU's 1.5 * 2^23 trick), clamp to [-127, 127].
__device__ __forceinline__ uint8_t FloatToInt8Code(float v) {
  constexpr float kMagic = 12582912.0f;
  int32_t q = static_cast<int32_t>(__fsub_rn(__fadd_rn(v, kMagic), kMagic));
  q = q > 127 ? 127 : (q < -127 ? -127 : q);
  return static_cast<uint8_t>(static_cast<int8_t>(q));
}

// ------------------------------------------------------------------ decoding (exact)

__device__ __forceinline__ float Bf16CodeToFloat(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ __forceinline__ float Fp8E4M3CodeToFloat(uint8_t b) {
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

__device__ __forceinline__ bool KvScaled(config::KvDtype d) {
  return d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8;
}

__device__ __forceinline__ float HalfCodeToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// An int4 scale slot: (step, min) as two fp16 codes, step in the low half (kv_quant.h).
// x = min + code * step, rounded as the CPU rounds it (no FMA).
__device__ __forceinline__ float Int4Decode(float packed, int code) {
  const uint32_t u = __float_as_uint(packed);
  const float step = HalfCodeToFloat(static_cast<uint16_t>(u & 0xffffu));
  const float min = HalfCodeToFloat(static_cast<uint16_t>(u >> 16));
  return __fadd_rn(min, __fmul_rn(static_cast<float>(code), step));
}

__device__ __forceinline__ int Int4CodeAt(const uint8_t* row, int i) {
  const int b = row[i >> 1];
  return (i & 1) ? (b >> 4) : (b & 0xf);
}

// The scale a row of side kv carries for the per-row scaled dtypes (fp8, int8); 1 otherwise.
__device__ __forceinline__ float KvRowScale(const KvGeometry& g, int kv, const float* run_scales, int off) {
  return KvScaled(g.dtype[kv]) ? run_scales[off] : 1.0f;
}

// Element i of row `off` of one (block, kv, head) run, dequantized exactly as the CPU's
// DequantizeRun: `run` and `run_scales` point at the run's data and scales (KvRunByteOffset,
// KvRunScaleOffset), `row_scale` is KvRowScale of the row. int4 keys read channel i's scale
// slot, int4 values their group's slot of the row.
__device__ __forceinline__ float LoadKvRunElem(const KvGeometry& g, int kv, const std::byte* run,
                                               const float* run_scales, int off, int i, float row_scale) {
  const std::byte* row = run + off * g.row_bytes[kv];
  switch (g.dtype[kv]) {
    case config::KvDtype::kFp32:
      return reinterpret_cast<const float*>(row)[i];
    case config::KvDtype::kFp16:
      return __half2float(reinterpret_cast<const __half*>(row)[i]);
    case config::KvDtype::kBf16:
      return Bf16CodeToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
    case config::KvDtype::kFp8E4M3:
      return Fp8E4M3CodeToFloat(reinterpret_cast<const uint8_t*>(row)[i]) * row_scale;
    case config::KvDtype::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(row)[i]) * row_scale;
    case config::KvDtype::kInt4: {
      const int code = Int4CodeAt(reinterpret_cast<const uint8_t*>(row), i);
      const float packed = kv == 0 ? run_scales[i] : run_scales[off * g.v_groups + i / g.int4_group];
      return Int4Decode(packed, code);
    }
  }
  return 0.0f;
}

// ------------------------------------------------------------------ int4 encoding

inline constexpr int kInt4MaxCode = 15;

// The fp16 code one step toward -inf from h (finite h), as kv_quant.cc's HalfNextDown.
__device__ __forceinline__ uint16_t HalfNextDown(uint16_t h) {
  if (h == 0x0000u) return 0x8001u;
  if (h & 0x8000u) return static_cast<uint16_t>(h + 1);
  return static_cast<uint16_t>(h - 1);
}

struct Int4Range {
  float step;
  float min;
  float packed;
};

// MakeInt4Range: min rounded down and step rounded up in fp16, so [min, min + 15 step]
// covers [lo, hi].
__device__ __forceinline__ Int4Range MakeInt4Range(float lo, float hi) {
  uint16_t lo_h = FloatToHalfCode(lo);
  if (HalfCodeToFloat(lo_h) > lo) lo_h = HalfNextDown(lo_h);
  const float min = HalfCodeToFloat(lo_h);
  const float need = __fdiv_rn(__fsub_rn(hi, min), static_cast<float>(kInt4MaxCode));
  uint16_t step_h = FloatToHalfCode(need);
  if (HalfCodeToFloat(step_h) < need) step_h = static_cast<uint16_t>(step_h + 1);
  return {HalfCodeToFloat(step_h), min,
          __uint_as_float(static_cast<uint32_t>(step_h) | (static_cast<uint32_t>(lo_h) << 16))};
}

__device__ __forceinline__ Int4Range UnpackInt4Range(float packed) {
  const uint32_t u = __float_as_uint(packed);
  return {HalfCodeToFloat(static_cast<uint16_t>(u & 0xffffu)), HalfCodeToFloat(static_cast<uint16_t>(u >> 16)),
          packed};
}

// Int4Encode: round((x - lo) * inv) to nearest even, clamped to [0, 15].
__device__ __forceinline__ int Int4Encode(float x, float lo, float inv) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23, as RoundToInt
  int32_t q = static_cast<int32_t>(__fsub_rn(__fadd_rn(__fmul_rn(__fsub_rn(x, lo), inv), kMagic), kMagic));
  return q < 0 ? 0 : (q > kInt4MaxCode ? kInt4MaxCode : q);
}

__device__ __forceinline__ float Int4Inverse(float step) { return step > 0.0f ? __fdiv_rn(1.0f, step) : 0.0f; }

__device__ __forceinline__ void SetInt4CodeAt(uint8_t* row, int i, int code) {
  uint8_t b = row[i >> 1];
  b = (i & 1) ? static_cast<uint8_t>((b & 0x0f) | (code << 4)) : static_cast<uint8_t>((b & 0xf0) | code);
  row[i >> 1] = b;
}

// QuantizeInt4Row: one row of head_dim values in groups of `group` (the last may be shorter),
// codes into dst, one packed (step, min) per group into scales. One thread per row (groups of
// odd size share bytes).
__device__ __forceinline__ void QuantizeInt4Row(const float* src, int head_dim, int group, uint8_t* dst,
                                                float* scales) {
  const int groups = (head_dim + group - 1) / group;
  for (int gi = 0; gi < groups; ++gi) {
    const int b = gi * group;
    const int e = min(head_dim, b + group);
    float lo = src[b], hi = src[b];
    for (int i = b + 1; i < e; ++i) {
      lo = fminf(lo, src[i]);
      hi = fmaxf(hi, src[i]);
    }
    const Int4Range r = MakeInt4Range(lo, hi);
    const float inv = Int4Inverse(r.step);
    for (int i = b; i < e; ++i) SetInt4CodeAt(dst, i, Int4Encode(src[i], r.min, inv));
    scales[gi] = r.packed;
  }
  if (head_dim & 1) SetInt4CodeAt(dst, head_dim, 0);
}

// WriteInt4ChannelRows restricted to the channels of byte column `pair` (2 pair, 2 pair + 1),
// so threads that own different pairs write disjoint bytes: rows [first, first + n) of an
// int4 key run from src (row r at src + r * src_stride); a channel whose range must widen
// re-encodes rows [0, first) from their decoded values. Returns the channels widened.
__device__ __forceinline__ int WriteInt4KeyPair(uint8_t* run, float* scales, int head_dim, int first, int n,
                                                const float* src, int64_t src_stride, int pair) {
  const int rb = (head_dim + 1) / 2;
  int widened = 0;
  for (int c = 2 * pair; c < 2 * pair + 2 && c < head_dim; ++c) {
    float lo = src[c], hi = src[c];
    for (int r = 1; r < n; ++r) {
      lo = fminf(lo, src[r * src_stride + c]);
      hi = fmaxf(hi, src[r * src_stride + c]);
    }
    Int4Range range;
    if (first > 0) {
      const Int4Range old = UnpackInt4Range(scales[c]);
      const float old_hi = __fadd_rn(old.min, __fmul_rn(static_cast<float>(kInt4MaxCode), old.step));
      if (lo < old.min || hi > old_hi) {
        range = MakeInt4Range(fminf(lo, old.min), fmaxf(hi, old_hi));
        const float inv = Int4Inverse(range.step);
        for (int r = 0; r < first; ++r) {
          uint8_t* row = run + r * rb;
          const float x = __fadd_rn(old.min, __fmul_rn(static_cast<float>(Int4CodeAt(row, c)), old.step));
          SetInt4CodeAt(row, c, Int4Encode(x, range.min, inv));
        }
        ++widened;
      } else {
        range = old;
      }
    } else {
      range = MakeInt4Range(lo, hi);
    }
    const float inv = Int4Inverse(range.step);
    for (int r = 0; r < n; ++r) SetInt4CodeAt(run + (first + r) * rb, c, Int4Encode(src[r * src_stride + c], range.min, inv));
    scales[c] = range.packed;
  }
  if ((head_dim & 1) && 2 * pair + 1 == head_dim) {
    for (int r = first; r < first + n; ++r) SetInt4CodeAt(run + r * rb, head_dim, 0);
  }
  return widened;
}

}  // namespace kvserve::kernels::cuda
