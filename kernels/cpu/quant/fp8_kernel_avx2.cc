// AVX2 FP8 kernels (fp8_format.h): the AVX-512 kernels' operations on two 8-lane halves of
// each 16-row panel column (rows 0..7 and 8..15), in the same canonical order, so their
// results equal the AVX-512 and portable kernels' bit for bit. Same tile shapes (the larger
// ones spill a few accumulators on 16 ymm registers; decode batches use the small ones). Prefill
// (Fp8Avx2PanelRows) widens each block once into L1 and runs 2 rows at a time from there.
#include <algorithm>
#include <utility>

#include "kernels/cpu/quant/fp8_format.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

namespace kvserve::kernels::cpu::quant {

#ifdef KVS_HAVE_X86
namespace {

#define KVS_FP8_AVX2 __attribute__((target("avx2,fma,f16c")))

// 8 codes -> their values times 2^-8, exactly (fp8_format.h).
KVS_FP8_AVX2 inline __m256 Widen8(const uint8_t* p) {
  const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i h =
      _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80)));
  return _mm256_cvtph_ps(h);
}

template <int R, int P>
KVS_FP8_AVX2 void Kernel(const Fp8Tile& t) {
  constexpr int H = 2;  // halves of a panel column
  __m256 acc[R][P][H];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[r][p][h] = _mm256_setzero_ps();
  const int64_t kblocks = (t.in + kFp8KBlock - 1) / kFp8KBlock;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int n = static_cast<int>(std::min<int64_t>(kFp8KBlock, t.in - kb * kFp8KBlock));
    const uint8_t* codes[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
      codes[p] = t.panels + p * t.panel_bytes + kb * kFp8BlockBytes + kFp8ScaleBytes;
    const float* xk[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xk[r] = t.x + r * t.x_stride + kb * kFp8KBlock;
    __m256 c0[R][P][H], c1[R][P][H];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          c0[r][p][h] = _mm256_setzero_ps();
          c1[r][p][h] = _mm256_setzero_ps();
        }
      }
    }
    int k = 0;
    for (; k + 1 < n; k += 2) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          const __m256 w0 = Widen8(codes[p] + kFp8PanelRows * k + 8 * h);
          const __m256 w1 = Widen8(codes[p] + kFp8PanelRows * (k + 1) + 8 * h);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            c0[r][p][h] = _mm256_fmadd_ps(w0, _mm256_set1_ps(xk[r][k]), c0[r][p][h]);
            c1[r][p][h] = _mm256_fmadd_ps(w1, _mm256_set1_ps(xk[r][k + 1]), c1[r][p][h]);
          }
        }
      }
    }
    if (k < n) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          const __m256 w0 = Widen8(codes[p] + kFp8PanelRows * k + 8 * h);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
            c0[r][p][h] = _mm256_fmadd_ps(w0, _mm256_set1_ps(xk[r][k]), c0[r][p][h]);
        }
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const float* scales = reinterpret_cast<const float*>(codes[p] - kFp8ScaleBytes);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        const __m256 scale = _mm256_loadu_ps(scales + 8 * h);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          acc[r][p][h] =
              _mm256_fmadd_ps(_mm256_add_ps(c0[r][p][h], c1[r][p][h]), scale, acc[r][p][h]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* y = t.y + r * t.y_stride;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      alignas(32) float v[kFp8PanelRows];
      _mm256_store_ps(v, acc[r][p][0]);
      _mm256_store_ps(v + 8, acc[r][p][1]);
      const int lanes = std::clamp(t.valid - p * kFp8PanelRows, 0, kFp8PanelRows);
      for (int i = 0; i < lanes; ++i) {
        const int o = p * kFp8PanelRows + i;
        float s = v[i];
        if (t.accumulate) s = s + y[o];
        if (t.bias != nullptr) s = s + t.bias[o];
        y[o] = s;
      }
    }
  }
}

// Prefill: one block of one panel already widened into w[128][16] (L1), R <= 2 rows' chains
// (2 rows x 2 halves x 2 chains = 8 accumulators, no spills on 16 ymm registers).
template <int R>
KVS_FP8_AVX2 void BlockRows(const float* w, int n, const float* x, int64_t x_stride,
                            const float* scale, float* acc) {
  __m256 c0[R][2], c1[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) c0[r][0] = c0[r][1] = c1[r][0] = c1[r][1] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 1 < n; k += 2) {
    const float* w0 = w + kFp8PanelRows * k;
    const __m256 a0 = _mm256_load_ps(w0), a1 = _mm256_load_ps(w0 + 8);
    const __m256 b0 = _mm256_load_ps(w0 + 16), b1 = _mm256_load_ps(w0 + 24);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x0 = _mm256_set1_ps(x[r * x_stride + k]);
      const __m256 x1 = _mm256_set1_ps(x[r * x_stride + k + 1]);
      c0[r][0] = _mm256_fmadd_ps(a0, x0, c0[r][0]);
      c0[r][1] = _mm256_fmadd_ps(a1, x0, c0[r][1]);
      c1[r][0] = _mm256_fmadd_ps(b0, x1, c1[r][0]);
      c1[r][1] = _mm256_fmadd_ps(b1, x1, c1[r][1]);
    }
  }
  if (k < n) {
    const float* w0 = w + kFp8PanelRows * k;
    const __m256 a0 = _mm256_load_ps(w0), a1 = _mm256_load_ps(w0 + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x0 = _mm256_set1_ps(x[r * x_stride + k]);
      c0[r][0] = _mm256_fmadd_ps(a0, x0, c0[r][0]);
      c0[r][1] = _mm256_fmadd_ps(a1, x0, c0[r][1]);
    }
  }
  // Keeps the scale loads below the loop: hoisted above it they take two of the 16 registers
  // and push an accumulator onto the stack (a store-forwarding chain per iteration).
  asm volatile("" ::: "memory");
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      float* a = acc + r * kFp8PanelRows + 8 * h;
      _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_add_ps(c0[r][h], c1[r][h]),
                                         _mm256_loadu_ps(scale + 8 * h), _mm256_load_ps(a)));
    }
  }
}

template <int... Rs>
constexpr Fp8KernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  Fp8KernelTable table{};
  ((table.fn[0][Rs] = &Kernel<Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &Kernel<(Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &Kernel<1, 4>;
  return table;
}

}  // namespace

bool Fp8CpuHasAvx2() {
  // F16C (the widen's vcvtph2ps) comes with every AVX2 CPU (Ivy Bridge and later); clang's
  // __builtin_cpu_supports has no "f16c" feature to ask.
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

KVS_FP8_AVX2 void Fp8Avx2PanelRows(const Fp8Tile& t, int64_t rows) {
  constexpr int kGroup = 64;  // rows whose accumulators stay in L1 (4 KiB)
  alignas(32) float w[kFp8KBlock * kFp8PanelRows];
  alignas(32) float acc[kGroup * kFp8PanelRows];
  const int64_t kblocks = (t.in + kFp8KBlock - 1) / kFp8KBlock;
  for (int64_t g0 = 0; g0 < rows; g0 += kGroup) {
    const int g = static_cast<int>(std::min<int64_t>(kGroup, rows - g0));
    std::fill(acc, acc + g * kFp8PanelRows, 0.0f);
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int n = static_cast<int>(std::min<int64_t>(kFp8KBlock, t.in - kb * kFp8KBlock));
      const uint8_t* blk = t.panels + kb * kFp8BlockBytes;
      for (int k = 0; k < n; ++k) {
        _mm256_store_ps(w + kFp8PanelRows * k, Widen8(blk + kFp8ScaleBytes + kFp8PanelRows * k));
        _mm256_store_ps(w + kFp8PanelRows * k + 8,
                        Widen8(blk + kFp8ScaleBytes + kFp8PanelRows * k + 8));
      }
      const float* scale = reinterpret_cast<const float*>(blk);
      for (int r0 = 0; r0 < g; r0 += 2) {
        const float* x = t.x + (g0 + r0) * t.x_stride + kb * kFp8KBlock;
        float* a = acc + r0 * kFp8PanelRows;
        if (g - r0 >= 2) {
          BlockRows<2>(w, n, x, t.x_stride, scale, a);
        } else {
          BlockRows<1>(w, n, x, t.x_stride, scale, a);
        }
      }
    }
    const int lanes = std::clamp(t.valid, 0, kFp8PanelRows);
    for (int r = 0; r < g; ++r) {
      float* y = t.y + (g0 + r) * t.y_stride;
      for (int i = 0; i < lanes; ++i) {
        float v = acc[r * kFp8PanelRows + i];
        if (t.accumulate) v = v + y[i];
        if (t.bias != nullptr) v = v + t.bias[i];
        y[i] = v;
      }
    }
  }
}

const Fp8KernelTable& Fp8Avx2Kernels() {
  static constexpr Fp8KernelTable kTable =
      MakeTable(std::make_integer_sequence<int, kFp8MaxTileRows>{});
  return kTable;
}

#else  // not x86

bool Fp8CpuHasAvx2() { return false; }
void Fp8Avx2PanelRows(const Fp8Tile&, int64_t) {}

const Fp8KernelTable& Fp8Avx2Kernels() { return Fp8PortableKernels(); }

#endif

}  // namespace kvserve::kernels::cpu::quant
