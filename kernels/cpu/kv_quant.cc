#include "kernels/cpu/kv_quant.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace kvserve::kernels::cpu {
namespace {

using config::KvDtype;

inline uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// E4M3 decode table: 256 entries cover every code, so dequantization is one load and one
// multiply. constexpr (immutable, built at compile time), not a mutable static.
constexpr float Pow2(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}
constexpr float DecodeFp8E4M3(uint8_t b) {
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  float mag;
  if (exp == 0) {
    mag = static_cast<float>(mant) * Pow2(-9);  // subnormal: m * 2^-9
  } else if (exp == 0xf && mant == 0x7) {
    mag = __builtin_nanf("");  // S.1111.111 is the only NaN; there is no inf
  } else {
    mag = (1.0f + static_cast<float>(mant) / 8.0f) * Pow2(exp - 7);
  }
  return (b & 0x80) ? -mag : mag;
}
constexpr std::array<float, 256> MakeFp8Table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = DecodeFp8E4M3(static_cast<uint8_t>(i));
  return t;
}
constexpr std::array<float, 256> kFp8E4M3Table = MakeFp8Table();

inline float MaxAbs(const float* src, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(src[i]));
  return m;
}

// Round-to-nearest-even to int without errno or library calls: adding and subtracting
// 1.5 * 2^23 leaves the nearest integer under the default rounding mode (|v| <= 2^22).
inline int32_t RoundToInt(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return static_cast<int32_t>((v + kMagic) - kMagic);
}

// Decoders used both by the scalar API and inside the row loops (internal linkage, so they
// inline into the vectorized loops).
inline float HalfToFloatImpl(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t shifted = em << 13;
  // Scaling by 2^(127-15) rebiases normals and turns subnormals (read as binary32
  // denormals) into their exact values; inf/NaN need the exponent forced to all ones.
  const uint32_t r = Bits(FromBits(shifted) * 0x1p112f);
  // All ones when em >= 0x7c00 (em <= 0x7fff, so the subtraction's sign says it); a mask
  // instead of a conditional keeps the row loops free of control flow (vectorizable).
  const uint32_t special = static_cast<uint32_t>(static_cast<int32_t>(0x7bffu - em) >> 31);
  return FromBits(((r & ~special) | ((shifted | 0x7f800000u) & special)) | sign);
}

inline float Bf16ToFloatImpl(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

// Arithmetic twin of kFp8E4M3Table for the row loop (a table lookup does not vectorize):
// the 7 magnitude bits land in a binary32's exponent/mantissa, and scaling by 2^(127-7)
// rebiases normals and makes subnormals exact, as in HalfToFloatImpl. 0x7f is NaN.
inline float Fp8E4M3ToFloatImpl(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t em = b & 0x7fu;
  const uint32_t r = Bits(FromBits(em << 20) * 0x1p120f);
  const uint32_t nan = static_cast<uint32_t>(static_cast<int32_t>(0x7eu - em) >> 31);
  return FromBits(((r & ~nan) | (0x7fc00000u & nan)) | sign);
}

}  // namespace

// ---------------------------------------------------------------- scalar conversions

uint16_t FloatToHalf(float x) {
  uint32_t f = Bits(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t h;
  if (f >= 0x47800000u) {  // >= 65536: overflow, inf or NaN
    h = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (f < 0x38800000u) {  // < 2^-14: half subnormal or zero
    // 0.5f has an ulp of 2^-24, the half subnormal step, so the FPU's own RNE addition
    // does the rounding; the mantissa bits then are the subnormal code (0x400 = 2^-14).
    h = Bits(FromBits(f) + 0.5f) - 0x3f000000u;
  } else {
    // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, ties to
    // even; a carry out of the mantissa bumps the exponent, up to inf for >= 65520.
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += 0xc8000fffu + mant_odd;  // ((15 - 127) << 23) + 0xfff, modulo 2^32
    h = f >> 13;
  }
  return static_cast<uint16_t>(h | sign);
}

float HalfToFloat(uint16_t h) { return HalfToFloatImpl(h); }

uint16_t FloatToBf16(float x) {
  const uint32_t f = Bits(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t b) { return Bf16ToFloatImpl(b); }

uint8_t FloatToFp8E4M3(float x) {
  uint32_t f = Bits(x);
  const uint32_t sign = (f >> 24) & 0x80u;
  f &= 0x7fffffffu;
  if (f > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (f >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  uint32_t code;
  if (f < 0x3c800000u) {  // < 2^-6: subnormal, a multiple of 2^-9
    // 2^14 has an ulp of 2^-9: the addition rounds to the subnormal step (ties to even).
    code = Bits(FromBits(f) + 16384.0f) - 0x46800000u;  // 0..8 (8 = 2^-6, the first normal)
  } else {
    // Round the mantissa to 3 bits (ties to even) and rebias the exponent 127 -> 7.
    const uint32_t mant_odd = (f >> 20) & 1u;
    f += 0x7ffffu + mant_odd;
    code = (f >> 20) - (120u << 3);
    code = code > 0x7eu ? 0x7eu : code;  // a rounding carry past 448 saturates, never NaN
  }
  return static_cast<uint8_t>(sign | code);
}

float Fp8E4M3ToFloat(uint8_t b) { return kFp8E4M3Table[b]; }

// ---------------------------------------------------------------- rows

void QuantizeRow(const float* src, int head_dim, KvDtype dtype, std::byte* dst, float* scale) {
  switch (dtype) {
    case KvDtype::kFp32:
      std::memcpy(dst, src, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kFp16:
      for (int i = 0; i < head_dim; ++i) {
        const uint16_t h = FloatToHalf(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kBf16:
      for (int i = 0; i < head_dim; ++i) {
        const uint16_t h = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kFp8E4M3: {
      const float s = MaxAbs(src, head_dim) / kFp8E4M3Max;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      for (int i = 0; i < head_dim; ++i) dst[i] = std::byte{FloatToFp8E4M3(src[i] * inv)};
      *scale = s;
      return;
    }
    case KvDtype::kInt8: {
      const float s = MaxAbs(src, head_dim) / kInt8Max;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      for (int i = 0; i < head_dim; ++i) {
        int32_t q = RoundToInt(src[i] * inv);
        q = q > 127 ? 127 : (q < -127 ? -127 : q);
        dst[i] = static_cast<std::byte>(static_cast<int8_t>(q));
      }
      *scale = s;
      return;
    }
  }
}

namespace {

// The loops below are written to vectorize at -O2: GCC's default "very cheap" cost model
// there only vectorizes loops with a constant trip count, so rows are processed in chunks
// of kLanes with a scalar tail; `__restrict__` tells it that the float output never
// aliases the byte input (std::byte may alias anything). 16-bit codes are read through a
// may_alias type: copying chunks through a stack buffer instead measured ~15x slower.
constexpr int kLanes = 16;
typedef uint16_t __attribute__((may_alias)) AliasedU16;

template <bool kBf16>
void DequantizeHalves(const std::byte* __restrict__ src, int n, float* __restrict__ dst) {
  auto convert = [](uint16_t h) { return kBf16 ? Bf16ToFloatImpl(h) : HalfToFloatImpl(h); };
  const AliasedU16* codes = reinterpret_cast<const AliasedU16*>(src);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) dst[i + j] = convert(codes[i + j]);
  }
  for (; i < n; ++i) dst[i] = convert(codes[i]);
}

void DequantizeFp8(const std::byte* __restrict__ src, float s, int n, float* __restrict__ dst) {
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(src);  // unsigned char may alias
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) dst[i + j] = Fp8E4M3ToFloatImpl(codes[i + j]) * s;
  }
  for (; i < n; ++i) dst[i] = Fp8E4M3ToFloatImpl(codes[i]) * s;
}

void DequantizeInt8(const std::byte* __restrict__ src, float s, int n, float* __restrict__ dst) {
  const int8_t* q = reinterpret_cast<const int8_t*>(src);  // signed char may alias anything
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) dst[i + j] = static_cast<float>(q[i + j]) * s;
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(q[i]) * s;
}

}  // namespace

void DequantizeRow(const std::byte* src, const float* scale, int head_dim, KvDtype dtype,
                   float* dst) {
  switch (dtype) {
    case KvDtype::kFp32:
      std::memcpy(dst, src, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kFp16:
      DequantizeHalves<false>(src, head_dim, dst);
      return;
    case KvDtype::kBf16:
      DequantizeHalves<true>(src, head_dim, dst);
      return;
    case KvDtype::kFp8E4M3:
      DequantizeFp8(src, *scale, head_dim, dst);
      return;
    case KvDtype::kInt8:
      DequantizeInt8(src, *scale, head_dim, dst);
      return;
  }
}

void DequantizeRows(const std::byte* src, const float* scales, int num_rows, int head_dim,
                    KvDtype dtype, float* dst) {
  const size_t row_bytes = static_cast<size_t>(head_dim) * cache::KvDtypeBytes(dtype);
  const bool scaled = cache::KvDtypeHasScales(dtype);
  for (int r = 0; r < num_rows; ++r) {
    DequantizeRow(src + r * row_bytes, scaled ? scales + r : nullptr, head_dim, dtype,
                  dst + static_cast<size_t>(r) * head_dim);
  }
}

// ---------------------------------------------------------------- paged-layout addressing

void WriteKvRow(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
                int64_t block, int kv, int head, int offset, const float* src) {
  std::byte* dst = layer_data + layout.elem_offset(block, kv, head, offset) * layout.elem_bytes();
  float* scale =
      layout.has_scales() ? layer_scales + layout.scale_offset(block, kv, head, offset) : nullptr;
  QuantizeRow(src, layout.head_dim, layout.dtype, dst, scale);
}

void ReadKvRow(const cache::KvLayout& layout, const std::byte* layer_data,
               const float* layer_scales, int64_t block, int kv, int head, int offset,
               float* dst) {
  const std::byte* src =
      layer_data + layout.elem_offset(block, kv, head, offset) * layout.elem_bytes();
  const float* scale =
      layout.has_scales() ? layer_scales + layout.scale_offset(block, kv, head, offset) : nullptr;
  DequantizeRow(src, scale, layout.head_dim, layout.dtype, dst);
}

}  // namespace kvserve::kernels::cpu
