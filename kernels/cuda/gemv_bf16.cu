#include "kernels/cuda/gemv_bf16.h"

#include <cuda_runtime.h>

#include <type_traits>

namespace kvserve::kernels::cuda {
namespace {

constexpr int kGemvWarps = 8;  // output rows of W per CTA (one per warp)

__device__ __forceinline__ void DecodeBf16x8(const uint4& r, float (&v)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// `split` warps (1, 2, 4 or 8) compute y[r][o] for every row r: warp part p of output o reads
// W[o][8 (32 (p + split k) + lane) ...] (streaming, not kept in L1: each weight is read once per
// step) and x's matching 8 values per row (the same for every output, so they stay in cache),
// accumulates in fp32; the warp reduces by shuffles, then the first warp of the output adds
// the parts in order (deterministic). Splitting a row over several warps keeps enough loads in
// flight when W has few, long rows (the down projection: 2048 outputs x 8192 inputs).
template <int kRows>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvBf16Kernel(const uint16_t* x, int64_t x_stride, const uint16_t* w, float* y, int64_t y_stride, int in,
                   int out, int split, bool accumulate) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int o = static_cast<int>(blockIdx.x) * (kGemvWarps / split) + warp / split;
  const int part = warp % split;
  __shared__ float partial[kGemvWarps][kRows];
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  if (o < out) {
    const uint16_t* wr = w + static_cast<int64_t>(o) * in;
#pragma unroll 4
    for (int i = (part * 32 + lane) * 8; i < in; i += 32 * 8 * split) {
      float wf[8];
      DecodeBf16x8(__ldcs(reinterpret_cast<const uint4*>(wr + i)), wf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xf[8];
        DecodeBf16x8(*reinterpret_cast<const uint4*>(x + r * x_stride + i), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r] = fmaf(xf[e], wf[e], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float a = acc[r];
    for (int s = 16; s > 0; s >>= 1) a += __shfl_xor_sync(0xffffffffu, a, s);
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

// Warps per output: enough warps in flight over the whole device (about 16K), never more than
// the row has 256-element steps.
int SplitFor(int in, int out) {
  int split = 1;
  while (split < kGemvWarps && static_cast<int64_t>(out) * split < 16384 && in >= 256 * split * 2) split *= 2;
  return split;
}

}  // namespace

bool GemvBf16Applies(const void* x, int64_t x_stride, const void* w, int64_t rows, int in) {
  return rows >= 1 && rows <= kMaxGemvRows && in >= 8 && in % 8 == 0 && x_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

int GemvBf16(const uint16_t* x, int64_t x_stride, const uint16_t* w, float* y, int64_t y_stride, int64_t rows, int in,
             int out, bool accumulate, void* stream) {
  if (!GemvBf16Applies(x, x_stride, w, rows, in) || out < 1) return static_cast<int>(cudaErrorInvalidValue);
  const int split = SplitFor(in, out);
  const int per_cta = kGemvWarps / split;
  const dim3 grid(static_cast<unsigned>((out + per_cta - 1) / per_cta));
  auto st = static_cast<cudaStream_t>(stream);
  auto launch = [&](auto rows_c) {
    GemvBf16Kernel<decltype(rows_c)::value><<<grid, kGemvWarps * 32, 0, st>>>(x, x_stride, w, y, y_stride, in, out,
                                                                            split, accumulate);
  };
  switch (rows) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 5: launch(std::integral_constant<int, 5>{}); break;
    case 6: launch(std::integral_constant<int, 6>{}); break;
    case 7: launch(std::integral_constant<int, 7>{}); break;
    default: launch(std::integral_constant<int, 8>{}); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
