// AVX-512 FP8 kernels (fp8_format.h). Per k-block, per panel: each column of 16 codes is
// widened to 16 fp32 lanes (sign-extend to 16 bits, shift, and, vcvtph2ps) and multiplied by
// each tile row's broadcast activation into two chains (even and odd columns); the block's
// sum then meets the 16 row scales in one fma. Tiles: 1 row x 4 panels (batch 1: eight
// independent chains hide the fma latency), up to 4 rows x 2 panels, up to 8 rows x 1 panel
// (prefill: each widened column feeds 8 rows).
#include <algorithm>
#include <utility>

#include "kernels/cpu/quant/fp8_format.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

// GCC 12's AVX-512 headers pass an undefined vector as the merge source of unmasked
// conversions (cvtph2ps), which -Wmaybe-uninitialized reports; the values are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvserve::kernels::cpu::quant {

#ifdef KVS_HAVE_X86
namespace {

#define KVS_FP8_512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

// 16 codes -> their values times 2^-8, exactly (fp8_format.h).
KVS_FP8_512 inline __m512 Widen16(const uint8_t* p) {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h =
      _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  return _mm512_cvtph_ps(h);
}

// Two consecutive columns (32 codes) -> two vectors: one sign extension, shift and and on 32
// words, then two conversions (fewer instructions per code than two Widen16).
KVS_FP8_512 inline void Widen32(const uint8_t* p, __m512& w0, __m512& w1) {
  const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h =
      _mm512_and_si512(_mm512_slli_epi16(w, 7), _mm512_set1_epi16(static_cast<int16_t>(0xBF80)));
  w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

template <int R, int P>
KVS_FP8_512 void Kernel(const Fp8Tile& t) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
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
    __m512 c0[R][P], c1[R][P];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        c0[r][p] = _mm512_setzero_ps();
        c1[r][p] = _mm512_setzero_ps();
      }
    }
    int k = 0;
    for (; k + 1 < n; k += 2) {
      __m512 w0[P], w1[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) Widen32(codes[p] + kFp8PanelRows * k, w0[p], w1[p]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_set1_ps(xk[r][k]), x1 = _mm512_set1_ps(xk[r][k + 1]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          c0[r][p] = _mm512_fmadd_ps(w0[p], x0, c0[r][p]);
          c1[r][p] = _mm512_fmadd_ps(w1[p], x1, c1[r][p]);
        }
      }
    }
    if (k < n) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const __m512 w0 = Widen16(codes[p] + kFp8PanelRows * k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          c0[r][p] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xk[r][k]), c0[r][p]);
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m512 scale =
          _mm512_loadu_ps(reinterpret_cast<const float*>(codes[p] - kFp8ScaleBytes));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][p] = _mm512_fmadd_ps(_mm512_add_ps(c0[r][p], c1[r][p]), scale, acc[r][p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int lanes = std::clamp(t.valid - p * kFp8PanelRows, 0, kFp8PanelRows);
    if (lanes == 0) continue;
    const __mmask16 m = static_cast<__mmask16>((1u << lanes) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* y = t.y + r * t.y_stride + p * kFp8PanelRows;
      __m512 v = acc[r][p];
      if (t.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
      if (t.bias != nullptr)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.bias + p * kFp8PanelRows));
      _mm512_mask_storeu_ps(y, m, v);
    }
  }
}

// Prefill: one block of one panel already widened into w[128][16] (L1), R rows' chains.
template <int R>
KVS_FP8_512 void BlockRows(const float* w, int n, const float* x, int64_t x_stride,
                           const float* scale, float* acc) {
  __m512 c0[R], c1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  int k = 0;
  for (; k + 1 < n; k += 2) {
    const __m512 w0 = _mm512_load_ps(w + kFp8PanelRows * k);
    const __m512 w1 = _mm512_load_ps(w + kFp8PanelRows * (k + 1));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      c0[r] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[r * x_stride + k]), c0[r]);
      c1[r] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[r * x_stride + k + 1]), c1[r]);
    }
  }
  if (k < n) {
    const __m512 w0 = _mm512_load_ps(w + kFp8PanelRows * k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      c0[r] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[r * x_stride + k]), c0[r]);
  }
  const __m512 s = _mm512_loadu_ps(scale);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* a = acc + r * kFp8PanelRows;
    _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_add_ps(c0[r], c1[r]), s, _mm512_load_ps(a)));
  }
}

using BlockRowsFn = void (*)(const float*, int, const float*, int64_t, const float*, float*);
constexpr BlockRowsFn kBlockRows[8] = {&BlockRows<1>, &BlockRows<2>, &BlockRows<3>, &BlockRows<4>,
                                       &BlockRows<5>, &BlockRows<6>, &BlockRows<7>, &BlockRows<8>};

template <int... Rs>
constexpr Fp8KernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  Fp8KernelTable table{};
  ((table.fn[0][Rs] = &Kernel<Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &Kernel<(Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &Kernel<1, 4>;
  return table;
}

}  // namespace

bool Fp8CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

KVS_FP8_512 void Fp8Avx512PanelRows(const Fp8Tile& t, int64_t rows) {
  constexpr int kGroup = 64;  // rows whose accumulators stay in L1 (4 KiB)
  alignas(64) float w[kFp8KBlock * kFp8PanelRows];
  alignas(64) float acc[kGroup * kFp8PanelRows];
  const int64_t kblocks = (t.in + kFp8KBlock - 1) / kFp8KBlock;
  for (int64_t g0 = 0; g0 < rows; g0 += kGroup) {
    const int g = static_cast<int>(std::min<int64_t>(kGroup, rows - g0));
    std::fill(acc, acc + g * kFp8PanelRows, 0.0f);
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int n = static_cast<int>(std::min<int64_t>(kFp8KBlock, t.in - kb * kFp8KBlock));
      const uint8_t* blk = t.panels + kb * kFp8BlockBytes;
      int k = 0;
      for (; k + 1 < n; k += 2) {
        __m512 w0, w1;
        Widen32(blk + kFp8ScaleBytes + kFp8PanelRows * k, w0, w1);
        _mm512_store_ps(w + kFp8PanelRows * k, w0);
        _mm512_store_ps(w + kFp8PanelRows * (k + 1), w1);
      }
      if (k < n)
        _mm512_store_ps(w + kFp8PanelRows * k, Widen16(blk + kFp8ScaleBytes + kFp8PanelRows * k));
      const float* scale = reinterpret_cast<const float*>(blk);
      for (int r0 = 0; r0 < g; r0 += 8) {
        const int nr = std::min(8, g - r0);
        kBlockRows[nr - 1](w, n, t.x + (g0 + r0) * t.x_stride + kb * kFp8KBlock, t.x_stride, scale,
                           acc + r0 * kFp8PanelRows);
      }
    }
    const int lanes = std::clamp(t.valid, 0, kFp8PanelRows);
    const __mmask16 m = static_cast<__mmask16>((1u << lanes) - 1);
    for (int r = 0; r < g; ++r) {
      float* y = t.y + (g0 + r) * t.y_stride;
      __m512 v = _mm512_load_ps(acc + r * kFp8PanelRows);
      if (t.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
      if (t.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.bias));
      _mm512_mask_storeu_ps(y, m, v);
    }
  }
}

const Fp8KernelTable& Fp8Avx512Kernels() {
  static constexpr Fp8KernelTable kTable =
      MakeTable(std::make_integer_sequence<int, kFp8MaxTileRows>{});
  return kTable;
}

#else  // not x86

bool Fp8CpuHasAvx512() { return false; }
void Fp8Avx512PanelRows(const Fp8Tile&, int64_t) {}

const Fp8KernelTable& Fp8Avx512Kernels() { return Fp8PortableKernels(); }

#endif

}  // namespace kvserve::kernels::cpu::quant
