// AVX-512 VNNI panel kernels (panel_kernels.h). Per block of 32 inputs and per panel:
//   codes -> 8 (bytes) or 4 + 4 (nibbles, low and high half, plus bit planes) u8 vectors,
//   per row: vpdpbusd with the row's 4-byte activation groups broadcast, into one int32
//   accumulator (a, b per 32) or two (per 16: elements 0..15 and 16..31), then
//     acc = fma(float(isum), a*dx, acc); acc = fma(b, sx, acc)       (kD, kDM, kK, kAB)
//     acc = fma(float(Σ sc_h*(isum_h - 32*Σq_h)), d*dx, acc)         (kQ6, exact in int32)
//     acc = fma(float(isum_h), a_h*dx, acc); acc = fma(b_h, sx_h, acc) for h = lo, hi (kF32)
#include <cstring>
#include <utility>

#include "kernels/cpu/quant/panel_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

// GCC 12's AVX-512 headers pass an undefined vector as the merge source of unmasked
// conversions (vpmovzx*, cvtph2ps), which -Wmaybe-uninitialized reports in every kernel that
// inlines them; the values are never read (the masks are all ones).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvserve::kernels::cpu::quant {

#ifdef KVS_HAVE_X86
namespace {

#define KVS_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

KVS_VNNI_TARGET inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

KVS_VNNI_TARGET inline __m512 Half16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

KVS_VNNI_TARGET inline __mmask64 Mask64(const uint8_t* p) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return static_cast<__mmask64>(m);
}

template <Codes C, Scales S, int R, int P>
KVS_VNNI_TARGET void KernelVnni(const QTile& t) {
  constexpr int kUB = UnitBlocks(S);
  constexpr int kUnit = UnitBytes(C, S);
  constexpr bool kHalf = PerHalfBlock(S);
  constexpr int kI = kHalf ? 2 : 1;  // int accumulators per (row, panel)

  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i b4 = _mm512_set1_epi8(16);
  const __m512i b5x30 = _mm512_set1_epi8(0x30);
  const __m512 voff = _mm512_set1_ps(t.format.off);

  for (int64_t u = 0; u < t.units; ++u) {
    const uint8_t* unit[P];
    __m512 dv[P], dmv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      unit[p] = t.panels + p * t.panel_bytes + u * kUnit;
      if constexpr (S == Scales::kK || S == Scales::kQ6) dv[p] = Half16(unit[p]);
      if constexpr (S == Scales::kK) dmv[p] = Half16(unit[p] + 32);
    }
    for (int b = 0; b < kUB; ++b) {
      const int64_t kb = u * kUB + b;
      __m512i isum[R][P][kI];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
          for (int h = 0; h < kI; ++h) isum[r][p][h] = _mm512_setzero_si512();
      if constexpr (C == Codes::kBytes) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          __m512i w[P];
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p)
            w[p] = _mm512_loadu_si512(unit[p] + CodesAt(C, S, b) + 64 * j);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m512i x = Bcast4(t.xq + r * t.xq_stride + kb * kBlock + 4 * j);
#pragma GCC unroll 4
            for (int p = 0; p < P; ++p) {
              __m512i& s = isum[r][p][kHalf && j >= 4 ? 1 : 0];
              s = _mm512_dpbusd_epi32(s, w[p], x);
            }
          }
        }
      } else {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          __m512i wl[P], wh[P];
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p) {
            const uint8_t* rec = unit[p] + CodesAt(C, S, b);
            const __m512i v = _mm512_loadu_si512(rec + 64 * j);
            wl[p] = _mm512_and_si512(v, m4);
            wh[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if constexpr (C == Codes::kNibHi1) {
              wl[p] = _mm512_mask_add_epi8(wl[p], Mask64(rec + 256 + 8 * j), wl[p], b4);
              wh[p] = _mm512_mask_add_epi8(wh[p], Mask64(rec + 256 + 8 * (j + 4)), wh[p], b4);
            }
            if constexpr (C == Codes::kNibHi2) {
              // Crumbs: bits 4..5 of the codes; 0xD8 = "C ? B : A" (take B where C = 0x30).
              const __m512i h = _mm512_loadu_si512(rec + 256 + 64 * (j / 2));
              const __m512i hl = j % 2 == 0 ? _mm512_slli_epi16(h, 4) : h;
              const __m512i hh = j % 2 == 0 ? _mm512_slli_epi16(h, 2) : _mm512_srli_epi16(h, 2);
              wl[p] = _mm512_ternarylogic_epi32(wl[p], hl, b5x30, 0xD8);
              wh[p] = _mm512_ternarylogic_epi32(wh[p], hh, b5x30, 0xD8);
            }
          }
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int8_t* xr = t.xq + r * t.xq_stride + kb * kBlock;
            const __m512i xl = Bcast4(xr + 4 * j), xh = Bcast4(xr + 16 + 4 * j);
#pragma GCC unroll 4
            for (int p = 0; p < P; ++p) {
              isum[r][p][0] = _mm512_dpbusd_epi32(isum[r][p][0], wl[p], xl);
              __m512i& s = isum[r][p][kHalf ? 1 : 0];
              s = _mm512_dpbusd_epi32(s, wh[p], xh);
            }
          }
        }
      }
      // Scales of this block, per panel.
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const uint8_t* sc = unit[p] + ScalesAt(S, b);
        if constexpr (S == Scales::kD || S == Scales::kDM || S == Scales::kK || S == Scales::kAB) {
          __m512 a, bb;
          if constexpr (S == Scales::kD) {
            a = Half16(sc);
            bb = _mm512_mul_ps(a, voff);
          } else if constexpr (S == Scales::kDM) {
            a = Half16(sc);
            bb = Half16(sc + 32);
          } else if constexpr (S == Scales::kAB) {
            a = _mm512_loadu_ps(sc);
            bb = _mm512_loadu_ps(sc + 64);
          } else {
            const __m128i scv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
            const __m128i mnv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16));
            a = _mm512_mul_ps(dv[p], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scv)));
            // b = -(dmin*mn): negate after the product (ggml's rounding).
            bb =
                _mm512_sub_ps(_mm512_setzero_ps(),
                              _mm512_mul_ps(dmv[p], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mnv))));
          }
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const ActBlock& xb = t.xb[r * t.xb_stride + kb];
            const __m512 adx = _mm512_mul_ps(a, _mm512_set1_ps(xb.dx));
            acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][p][0]), adx, acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(bb, _mm512_set1_ps(xb.sx), acc[r][p]);
          }
        } else if constexpr (S == Scales::kQ6) {
          const __m512i slo =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
          const __m512i shi =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16)));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const ActBlock& xb = t.xb[r * t.xb_stride + kb];
            const __m512i lo = _mm512_sub_epi32(isum[r][p][0], _mm512_set1_epi32(xb.bs_lo32));
            const __m512i hi = _mm512_sub_epi32(isum[r][p][kI - 1], _mm512_set1_epi32(xb.bs_hi32));
            const __m512i s =
                _mm512_add_epi32(_mm512_mullo_epi32(lo, slo), _mm512_mullo_epi32(hi, shi));
            const __m512 ddx = _mm512_mul_ps(dv[p], _mm512_set1_ps(xb.dx));
            acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), ddx, acc[r][p]);
          }
        } else {  // kF32
          const float* f = reinterpret_cast<const float*>(sc);
          const __m512 alo = _mm512_loadu_ps(f), ahi = _mm512_loadu_ps(f + 16);
          const __m512 blo = _mm512_loadu_ps(f + 32), bhi = _mm512_loadu_ps(f + 48);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const ActBlock& xb = t.xb[r * t.xb_stride + kb];
            const __m512 dx = _mm512_set1_ps(xb.dx);
            acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][p][0]), _mm512_mul_ps(alo, dx),
                                        acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][p][kI - 1]),
                                        _mm512_mul_ps(ahi, dx), acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(blo, _mm512_set1_ps(xb.sx_lo), acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(bhi, _mm512_set1_ps(xb.sx_hi), acc[r][p]);
          }
        }
      }
    }
  }
  // Store: y (+ y) (+ bias), masked to the outputs that exist.
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* yr = t.y + r * t.y_stride;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const int n = t.valid - p * kPanelRows;
      if (n <= 0) continue;
      const __mmask16 m =
          n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
      __m512 v = acc[r][p];
      if (t.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yr + p * kPanelRows));
      if (t.bias != nullptr)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.bias + p * kPanelRows));
      _mm512_mask_storeu_ps(yr + p * kPanelRows, m, v);
    }
  }
}

template <Codes C, Scales S, int... Rs>
constexpr QKernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  QKernelTable table{};
  ((table.fn[0][Rs] = &KernelVnni<C, S, Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &KernelVnni<C, S, (Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &KernelVnni<C, S, 1, 4>;
  return table;
}

template <Codes C, Scales S>
const QKernelTable& TableFor() {
  static constexpr QKernelTable kTable =
      MakeTable<C, S>(std::make_integer_sequence<int, kMaxTileRows>{});
  return kTable;
}

}  // namespace

bool CpuHasAvx512Vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

const QKernelTable& Avx512VnniKernels(const PanelFormat& f) {
  switch (f.scales) {
    case Scales::kD:
      if (f.codes == Codes::kNib) return TableFor<Codes::kNib, Scales::kD>();
      if (f.codes == Codes::kNibHi1) return TableFor<Codes::kNibHi1, Scales::kD>();
      return TableFor<Codes::kBytes, Scales::kD>();
    case Scales::kDM:
      if (f.codes == Codes::kNib) return TableFor<Codes::kNib, Scales::kDM>();
      return TableFor<Codes::kNibHi1, Scales::kDM>();
    case Scales::kK:
      if (f.codes == Codes::kNib) return TableFor<Codes::kNib, Scales::kK>();
      return TableFor<Codes::kNibHi1, Scales::kK>();
    case Scales::kQ6:
      return TableFor<Codes::kNibHi2, Scales::kQ6>();
    case Scales::kAB:
      if (f.codes == Codes::kNib) return TableFor<Codes::kNib, Scales::kAB>();
      return TableFor<Codes::kBytes, Scales::kAB>();
    case Scales::kF32:
      break;
  }
  return TableFor<Codes::kBytes, Scales::kF32>();
}

#else  // not x86

bool CpuHasAvx512Vnni() { return false; }
const QKernelTable& Avx512VnniKernels(const PanelFormat&) { return PortableKernels(); }

#endif

}  // namespace kvserve::kernels::cpu::quant
