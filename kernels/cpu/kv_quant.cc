#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

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
    case KvDtype::kInt4:
      // One group spanning the row: the row API has no group parameter (QuantizeInt4Row has).
      QuantizeInt4Row(src, head_dim, head_dim, dst, scale);
      return;
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
    case KvDtype::kInt4:
      DequantizeInt4Rows(src, scale, 1, head_dim, head_dim, dst);
      return;
  }
}

void DequantizeRows(const std::byte* src, const float* scales, int num_rows, int head_dim,
                    KvDtype dtype, float* dst) {
  if (dtype == KvDtype::kInt4) {
    DequantizeInt4Rows(src, scales, num_rows, head_dim, head_dim, dst);
    return;
  }
  const size_t row_bytes = static_cast<size_t>(head_dim) * cache::KvDtypeBytes(dtype);
  const bool scaled = cache::KvDtypeHasScales(dtype);
  for (int r = 0; r < num_rows; ++r) {
    DequantizeRow(src + r * row_bytes, scaled ? scales + r : nullptr, head_dim, dtype,
                  dst + static_cast<size_t>(r) * head_dim);
  }
}

// ---------------------------------------------------------------- int4

namespace {

inline int Int4Code(const std::byte* row, int i) {
  const int b = static_cast<int>(std::to_integer<uint8_t>(row[i >> 1]));
  return (i & 1) ? (b >> 4) : (b & 0xf);
}
inline void SetInt4Code(std::byte* row, int i, int code) {
  uint8_t b = std::to_integer<uint8_t>(row[i >> 1]);
  b = (i & 1) ? static_cast<uint8_t>((b & 0x0f) | (code << 4)) : static_cast<uint8_t>((b & 0xf0) | code);
  row[i >> 1] = std::byte{b};
}
inline int Int4Encode(float x, float lo, float inv) {
  int32_t q = RoundToInt((x - lo) * inv);
  return q < 0 ? 0 : (q > kInt4MaxCode ? kInt4MaxCode : q);
}
inline size_t Int4RowBytes(int head_dim) { return (static_cast<size_t>(head_dim) + 1) / 2; }

// The fp16 code one step toward -inf from h (finite h).
uint16_t HalfNextDown(uint16_t h) {
  if (h == 0x0000u) return 0x8001u;      // +0 -> the smallest negative subnormal
  if (h & 0x8000u) return static_cast<uint16_t>(h + 1);  // negative: larger magnitude
  return static_cast<uint16_t>(h - 1);
}

}  // namespace

Int4Range MakeInt4Range(float lo, float hi) {
  // min rounded down and step rounded up in fp16, so [min, min + 15 step] covers [lo, hi].
  uint16_t lo_h = FloatToHalf(lo);
  if (HalfToFloat(lo_h) > lo) lo_h = HalfNextDown(lo_h);
  const float min = HalfToFloat(lo_h);
  const float need = (hi - min) / static_cast<float>(kInt4MaxCode);
  uint16_t step_h = FloatToHalf(need);
  if (HalfToFloat(step_h) < need) step_h = static_cast<uint16_t>(step_h + 1);
  return {HalfToFloat(step_h), min, std::bit_cast<float>(static_cast<uint32_t>(step_h) |
                                                         (static_cast<uint32_t>(lo_h) << 16))};
}

Int4Range UnpackInt4Scale(float packed) {
  const uint32_t u = std::bit_cast<uint32_t>(packed);
  return {HalfToFloat(static_cast<uint16_t>(u & 0xffffu)), HalfToFloat(static_cast<uint16_t>(u >> 16)), packed};
}

void QuantizeInt4Row(const float* src, int head_dim, int group, std::byte* dst, float* scales) {
  const int groups = (head_dim + group - 1) / group;
  for (int g = 0; g < groups; ++g) {
    const int b = g * group;
    const int e = std::min(head_dim, b + group);
    float lo = src[b];
    float hi = src[b];
    for (int i = b + 1; i < e; ++i) {
      lo = std::fmin(lo, src[i]);
      hi = std::fmax(hi, src[i]);
    }
    const Int4Range r = MakeInt4Range(lo, hi);
    const float inv = r.step > 0.0f ? 1.0f / r.step : 0.0f;
    for (int i = b; i < e; ++i) SetInt4Code(dst, i, Int4Encode(src[i], r.min, inv));
    scales[g] = r.packed;
  }
  if (head_dim & 1) SetInt4Code(dst, head_dim, 0);  // the unused high nibble stays defined
}

void DequantizeInt4Rows(const std::byte* src, const float* scales, int num_rows, int head_dim, int group,
                        float* dst) {
  const int groups = (head_dim + group - 1) / group;
  const size_t rb = Int4RowBytes(head_dim);
  for (int r = 0; r < num_rows; ++r) {
    const std::byte* row = src + r * rb;
    const float* sc = scales + static_cast<size_t>(r) * groups;
    float* out = dst + static_cast<size_t>(r) * head_dim;
    for (int g = 0; g < groups; ++g) {
      const int b = g * group;
      const int e = std::min(head_dim, b + group);
      const Int4Range range = UnpackInt4Scale(sc[g]);
      for (int i = b; i < e; ++i) out[i] = range.min + static_cast<float>(Int4Code(row, i)) * range.step;
    }
  }
}

int WriteInt4ChannelRows(std::byte* run, float* scales, int head_dim, int first_row, int num_rows,
                         const float* src, int64_t src_stride) {
  const size_t rb = Int4RowBytes(head_dim);
  int widened = 0;
  for (int c = 0; c < head_dim; ++c) {
    float lo = src[c];
    float hi = src[c];
    for (int r = 1; r < num_rows; ++r) {
      lo = std::fmin(lo, src[r * src_stride + c]);
      hi = std::fmax(hi, src[r * src_stride + c]);
    }
    Int4Range range;
    if (first_row > 0) {
      const Int4Range old = UnpackInt4Scale(scales[c]);
      const float old_hi = old.min + static_cast<float>(kInt4MaxCode) * old.step;
      if (lo < old.min || hi > old_hi) {
        // Widen the channel and re-encode the rows already there from their decoded values.
        range = MakeInt4Range(std::fmin(lo, old.min), std::fmax(hi, old_hi));
        const float inv = range.step > 0.0f ? 1.0f / range.step : 0.0f;
        for (int r = 0; r < first_row; ++r) {
          std::byte* row = run + r * rb;
          const float x = old.min + static_cast<float>(Int4Code(row, c)) * old.step;
          SetInt4Code(row, c, Int4Encode(x, range.min, inv));
        }
        ++widened;
      } else {
        range = old;  // the new rows fit: the codes already there stay valid
      }
    } else {
      range = MakeInt4Range(lo, hi);
    }
    const float inv = range.step > 0.0f ? 1.0f / range.step : 0.0f;
    for (int r = 0; r < num_rows; ++r) {
      SetInt4Code(run + (first_row + r) * rb, c, Int4Encode(src[r * src_stride + c], range.min, inv));
    }
    scales[c] = range.packed;
  }
  if (head_dim & 1) {
    for (int r = first_row; r < first_row + num_rows; ++r) SetInt4Code(run + r * rb, head_dim, 0);
  }
  return widened;
}

void DequantizeInt4ChannelRows(const std::byte* run, const float* scales, int head_dim, int first_row,
                               int num_rows, float* dst) {
  const size_t rb = Int4RowBytes(head_dim);
  thread_local std::vector<float> steps, mins;  // grow once to head_dim
  steps.resize(static_cast<size_t>(head_dim));
  mins.resize(static_cast<size_t>(head_dim));
  for (int c = 0; c < head_dim; ++c) {
    const Int4Range r = UnpackInt4Scale(scales[c]);
    steps[c] = r.step;
    mins[c] = r.min;
  }
  for (int r = 0; r < num_rows; ++r) {
    const std::byte* row = run + (first_row + r) * rb;
    float* out = dst + static_cast<size_t>(r) * head_dim;
    for (int c = 0; c < head_dim; ++c) out[c] = mins[c] + static_cast<float>(Int4Code(row, c)) * steps[c];
  }
}

void DequantizeRun(const cache::KvLayout& layout, int kv, const std::byte* run, const float* run_scales,
                   int first, int n, float* dst) {
  const KvDtype dtype = layout.side_dtype(kv);
  const int hd = layout.side_dim(kv);
  if (dtype == KvDtype::kInt4) {
    if (kv == 0) {
      DequantizeInt4ChannelRows(run, run_scales, hd, first, n, dst);
    } else {
      DequantizeInt4Rows(run + first * layout.row_bytes(1), run_scales + static_cast<size_t>(first) * layout.v_groups(),
                         n, hd, layout.int4_group, dst);
    }
    return;
  }
  const bool scaled = cache::KvDtypeHasScales(dtype);
  DequantizeRows(run + first * layout.row_bytes(kv), scaled ? run_scales + first : nullptr, n, hd, dtype, dst);
}

void WriteKvRows(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales, int64_t block,
                 int kv, int head, int offset, int n, const float* src, int64_t src_stride) {
  const KvDtype dtype = layout.side_dtype(kv);
  std::byte* run = layer_data + layout.run_byte_offset(block, kv, head);
  float* run_scales =
      cache::KvDtypeHasScales(dtype) ? layer_scales + layout.run_scale_offset(block, kv, head) : nullptr;
  if (dtype == KvDtype::kInt4 && kv == 0) {
    WriteInt4ChannelRows(run, run_scales, layout.side_dim(0), offset, n, src, src_stride);
    return;
  }
  const size_t rb = layout.row_bytes(kv);
  for (int r = 0; r < n; ++r) {
    const float* row = src + r * src_stride;
    const int o = offset + r;
    if (dtype == KvDtype::kInt4) {
      QuantizeInt4Row(row, layout.head_dim, layout.int4_group, run + o * rb,
                      run_scales + static_cast<size_t>(o) * layout.v_groups());
    } else {
      QuantizeRow(row, layout.side_dim(kv), dtype, run + o * rb, run_scales != nullptr ? run_scales + o : nullptr);
    }
  }
}

void WriteKvRow(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
                int64_t block, int kv, int head, int offset, const float* src) {
  WriteKvRows(layout, layer_data, layer_scales, block, kv, head, offset, 1, src, layout.side_dim(kv));
}

void ReadKvRow(const cache::KvLayout& layout, const std::byte* layer_data,
               const float* layer_scales, int64_t block, int kv, int head, int offset,
               float* dst) {
  const std::byte* run = layer_data + layout.run_byte_offset(block, kv, head);
  const float* run_scales = cache::KvDtypeHasScales(layout.side_dtype(kv))
                                ? layer_scales + layout.run_scale_offset(block, kv, head)
                                : nullptr;
  DequantizeRun(layout, kv, run, run_scales, offset, 1, dst);
}

}  // namespace kvserve::kernels::cpu
