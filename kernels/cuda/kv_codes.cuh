// KV element codes in device code: the same bit-level algorithms as kernels/cpu/kv_quant.cc
// (restated, not shared: that file is host-only), so codes written on the device are
// bit-identical to the CPU's for every finite input, and decoded exactly as the CPU decodes
// them (every kernel that reads KV: attention, mass, compression scoring, compaction). Every float operation that takes part
// in rounding is an explicit _rn intrinsic, so nvcc cannot contract it into an FMA.
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

// cache::KvLayout addressing, restated for device code.
__device__ __forceinline__ size_t KvRunIndex(const cache::KvLayout& l, int64_t block, int kv, int head) {
  return (static_cast<size_t>(block) * 2 + static_cast<size_t>(kv)) * static_cast<size_t>(l.num_kv_heads) +
         static_cast<size_t>(head);
}
__device__ __forceinline__ size_t KvElemOffset(const cache::KvLayout& l, int64_t block, int kv, int head, int off) {
  return KvRunIndex(l, block, kv, head) * static_cast<size_t>(l.block_size) * static_cast<size_t>(l.head_dim) +
         static_cast<size_t>(off) * static_cast<size_t>(l.head_dim);
}
__device__ __forceinline__ size_t KvScaleOffset(const cache::KvLayout& l, int64_t block, int kv, int head, int off) {
  return KvRunIndex(l, block, kv, head) * static_cast<size_t>(l.block_size) + static_cast<size_t>(off);
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

// Element `i` of the row starting at element offset `base` of a layer array, dequantized
// (row_scale: the row's scale; ignored by the unscaled dtypes).
__device__ __forceinline__ float LoadKvElem(config::KvDtype dtype, const std::byte* data, size_t base, int i,
                                            float row_scale) {
  switch (dtype) {
    case config::KvDtype::kFp32:
      return reinterpret_cast<const float*>(data)[base + i];
    case config::KvDtype::kFp16:
      return __half2float(reinterpret_cast<const __half*>(data)[base + i]);
    case config::KvDtype::kBf16:
      return Bf16CodeToFloat(reinterpret_cast<const uint16_t*>(data)[base + i]);
    case config::KvDtype::kFp8E4M3:
      return Fp8E4M3CodeToFloat(reinterpret_cast<const uint8_t*>(data)[base + i]) * row_scale;
    case config::KvDtype::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(data)[base + i]) * row_scale;
  }
  return 0.0f;
}

}  // namespace kvserve::kernels::cuda
