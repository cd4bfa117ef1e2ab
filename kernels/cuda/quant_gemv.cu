#include "kernels/cuda/quant_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace kvserve::kernels::cuda {
namespace {

constexpr int kWarps = 8;  // warps per CTA

// 8 activations (one 16-byte load) to fp32.
template <bool kFp16>
__device__ __forceinline__ void DecodeAct8(const uint4& r, float (&v)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kFp16) {
      const float2 f = __half22float2(
          __halves2half2(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)),
                         __ushort_as_half(static_cast<unsigned short>(w[i] >> 16))));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    } else {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

// The 128 / kBits codes of one 16-byte load as floats q − z, exactly, in two instructions per
// code: the code masked in place (at bit kBits·j of a 16-bit half word; the upper half is shifted
// down once) under the exponent of 2^23 reads as the float 2^23 + q·2^(kBits·j), and one FMA
// scales that by 2^(−kBits·j) and subtracts 2^(23 − kBits·j) + z. q − z is a small integer, so
// the FMA's single rounding is exact. (The code must stay inside the 23 mantissa bits: hence
// half words.)
template <int kBits>
__device__ __forceinline__ void DecodeCodes(const uint4& raw, float z, float (&wq)[128 / kBits]) {
  constexpr int kPerHalf = 16 / kBits;  // codes per 16 bits: 4 or 2
  constexpr int kPerWord = 2 * kPerHalf;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  float mul[kPerHalf], add[kPerHalf];
#pragma unroll
  for (int j = 0; j < kPerHalf; ++j) {
    mul[j] = __uint_as_float(static_cast<uint32_t>(127 - kBits * j) << 23);  // 2^(−kBits·j)
    add[j] =
        -(__uint_as_float(static_cast<uint32_t>(150 - kBits * j) << 23) + z);  // exact: z < 2^kBits
  }
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = h == 0 ? words[k] : words[k] >> 16;
#pragma unroll
      for (int j = 0; j < kPerHalf; ++j) {
        wq[k * kPerWord + h * kPerHalf + j] =
            fmaf(__uint_as_float((v & (kMask << (kBits * j))) | 0x4B000000u), mul[j], add[j]);
      }
    }
  }
}

__device__ __forceinline__ float GroupZero(const uint8_t* zr, int g, int bits) {
  return static_cast<float>(zr != nullptr ? static_cast<int>(__ldg(zr + g)) : (1 << (bits - 1)));
}

// `split` warps (1, 2, 4 or 8) per output o: warp part p reads the 16-byte code chunks
// c = 32 (p + split k) + lane of row o (streaming: each weight byte is read once per step).
template <int kBits, int kRows, bool kFp16>
__global__ void __launch_bounds__(kWarps * 32)
    QuantGemvKernel(const uint16_t* x, int64_t x_stride, const uint8_t* codes,
                    const uint16_t* scales, const uint8_t* zeros, float* y, int64_t y_stride,
                    int in, int out, int group, int split, bool accumulate) {
  constexpr int kElems = 128 / kBits;  // elements per 16-byte chunk
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int o = static_cast<int>(blockIdx.x) * (kWarps / split) + warp / split;
  const int part = warp % split;
  __shared__ float partial[kWarps][kRows];
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  if (o < out) {
    const int chunks = in / kElems;
    const int groups = in / group;
    const uint4* wr =
        reinterpret_cast<const uint4*>(codes + static_cast<int64_t>(o) * (in / (8 / kBits)));
    const uint16_t* sr = scales + static_cast<int64_t>(o) * groups;
    const uint8_t* zr = zeros != nullptr ? zeros + static_cast<int64_t>(o) * groups : nullptr;
#pragma unroll 2
    for (int c = part * 32 + lane; c < chunks; c += 32 * split) {
      const uint4 raw = __ldcs(wr + c);
      const int g = c * kElems / group;  // kElems divides group: the chunk is in one group
      const float s = __half2float(__ushort_as_half(__ldg(sr + g)));
      float wq[kElems];
      DecodeCodes<kBits>(raw, GroupZero(zr, g, kBits), wq);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint16_t* xr = x + r * x_stride + static_cast<int64_t>(c) * kElems;
        float p = 0.0f;
#pragma unroll
        for (int v = 0; v < kElems / 8; ++v) {
          float xf[8];
          DecodeAct8<kFp16>(*reinterpret_cast<const uint4*>(xr + 8 * v), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) p = fmaf(xf[e], wq[8 * v + e], p);
        }
        acc[r] = fmaf(s, p, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float a = acc[r];
    for (int sh = 16; sh > 0; sh >>= 1) a += __shfl_xor_sync(0xffffffffu, a, sh);
    if (lane == 0) partial[warp][r] = a;
  }
  __syncthreads();
  if (o < out && part == 0 && lane < kRows) {
    const int r = lane;
    float a = 0.0f;
    for (int q = 0; q < split; ++q) a += partial[warp + q][r];
    float* dst = y + r * y_stride + o;
    *dst = accumulate ? *dst + a : a;
  }
}

// One thread per 16-byte code chunk: 128 / kBits outputs, written as 16-byte stores.
template <int kBits, bool kFp16>
__global__ void DequantizeKernel(const uint8_t* codes, const uint16_t* scales, const uint8_t* zeros,
                                 int in, int group, int64_t total_chunks, uint16_t* dst) {
  constexpr int kElems = 128 / kBits;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total_chunks) return;
  const int chunks_per_row = in / kElems;
  const int64_t o = idx / chunks_per_row;
  const int c = static_cast<int>(idx % chunks_per_row);
  const int groups = in / group;
  const int g = c * kElems / group;
  const float s = __half2float(__ushort_as_half(scales[o * groups + g]));
  float wq[kElems];
  DecodeCodes<kBits>(reinterpret_cast<const uint4*>(codes)[idx],
                     GroupZero(zeros != nullptr ? zeros + o * groups : nullptr, g, kBits), wq);
  uint4* out = reinterpret_cast<uint4*>(dst + o * in + static_cast<int64_t>(c) * kElems);
#pragma unroll
  for (int v = 0; v < kElems / 8; ++v) {
    uint32_t packed[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      unsigned short lo, hi;
      if constexpr (kFp16) {
        lo = __half_as_ushort(__float2half_rn(wq[8 * v + 2 * k] * s));
        hi = __half_as_ushort(__float2half_rn(wq[8 * v + 2 * k + 1] * s));
      } else {
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(wq[8 * v + 2 * k] * s));
        hi = __bfloat16_as_ushort(__float2bfloat16_rn(wq[8 * v + 2 * k + 1] * s));
      }
      packed[k] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
    out[v] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// Warps per output: enough warps in flight over the whole device (about 16K), never more than
// the row has 32-chunk steps to share.
int SplitFor(int chunks, int out) {
  int split = 1;
  while (split < kWarps && static_cast<int64_t>(out) * split < 16384 && chunks >= 32 * split * 2)
    split *= 2;
  return split;
}

template <int kBits, bool kFp16>
void LaunchGemv(const uint16_t* x, int64_t x_stride, const QuantWeightView& w, float* y,
                int64_t y_stride, int64_t rows, bool accumulate, cudaStream_t st) {
  const int in = w.shape.in, out = w.shape.out;
  const int split = SplitFor(in / (128 / kBits), out);
  const int per_cta = kWarps / split;
  const dim3 grid(static_cast<unsigned>((out + per_cta - 1) / per_cta));
  auto launch = [&](auto rows_c) {
    QuantGemvKernel<kBits, decltype(rows_c)::value, kFp16>
        <<<grid, kWarps * 32, 0, st>>>(x, x_stride, w.codes, w.scales, w.zeros, y, y_stride, in,
                                       out, w.shape.group, split, accumulate);
  };
  switch (rows) {
    case 1:
      launch(std::integral_constant<int, 1>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    case 3:
      launch(std::integral_constant<int, 3>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    case 5:
      launch(std::integral_constant<int, 5>{});
      break;
    case 6:
      launch(std::integral_constant<int, 6>{});
      break;
    case 7:
      launch(std::integral_constant<int, 7>{});
      break;
    default:
      launch(std::integral_constant<int, 8>{});
      break;
  }
}

bool ViewOk(const QuantWeightView& w) {
  return ValidateGroupQuantShape(w.shape).ok() && w.codes != nullptr && w.scales != nullptr &&
         (w.zeros != nullptr) == w.shape.has_zeros &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0;
}

}  // namespace

bool QuantGemvApplies(GemmDtype act, const void* x, int64_t x_stride, const QuantWeightView& w,
                      int64_t rows) {
  return (act == GemmDtype::kBf16 || act == GemmDtype::kFp16) && rows >= 1 &&
         rows <= kMaxGemvRows && ViewOk(w) && x_stride >= w.shape.in && x_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

int QuantGemv(GemmDtype act, const void* x, int64_t x_stride, const QuantWeightView& w, float* y,
              int64_t y_stride, int64_t rows, bool accumulate, void* stream) {
  if (!QuantGemvApplies(act, x, x_stride, w, rows) || y == nullptr || y_stride < w.shape.out) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const auto* xs = static_cast<const uint16_t*>(x);
  auto st = static_cast<cudaStream_t>(stream);
  const bool fp16 = act == GemmDtype::kFp16;
  if (w.shape.bits == 4) {
    fp16 ? LaunchGemv<4, true>(xs, x_stride, w, y, y_stride, rows, accumulate, st)
         : LaunchGemv<4, false>(xs, x_stride, w, y, y_stride, rows, accumulate, st);
  } else {
    fp16 ? LaunchGemv<8, true>(xs, x_stride, w, y, y_stride, rows, accumulate, st)
         : LaunchGemv<8, false>(xs, x_stride, w, y, y_stride, rows, accumulate, st);
  }
  return static_cast<int>(cudaGetLastError());
}

int DequantizeGroupQuant(const QuantWeightView& w, GemmDtype dtype, void* dst, void* stream) {
  if (!ViewOk(w) || (dtype != GemmDtype::kBf16 && dtype != GemmDtype::kFp16) ||
      reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int elems = 128 / w.shape.bits;
  const int64_t total = static_cast<int64_t>(w.shape.out) * (w.shape.in / elems);
  const dim3 grid(static_cast<unsigned>((total + 255) / 256));
  auto st = static_cast<cudaStream_t>(stream);
  auto* d = static_cast<uint16_t*>(dst);
  const bool fp16 = dtype == GemmDtype::kFp16;
  if (w.shape.bits == 4) {
    fp16 ? DequantizeKernel<4, true>
        <<<grid, 256, 0, st>>>(w.codes, w.scales, w.zeros, w.shape.in, w.shape.group, total, d)
         : DequantizeKernel<4, false>
        <<<grid, 256, 0, st>>>(w.codes, w.scales, w.zeros, w.shape.in, w.shape.group, total, d);
  } else {
    fp16 ? DequantizeKernel<8, true>
        <<<grid, 256, 0, st>>>(w.codes, w.scales, w.zeros, w.shape.in, w.shape.group, total, d)
         : DequantizeKernel<8, false>
        <<<grid, 256, 0, st>>>(w.codes, w.scales, w.zeros, w.shape.in, w.shape.group, total, d);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
