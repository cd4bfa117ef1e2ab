// AVX2 panel kernels (panel_kernels.h), for CPUs without AVX-512 VNNI: the same layout, each
// 64-byte panel vector taken as two 32-byte halves (rows 0..7 and 8..15). No vpdpbusd, so
// the 4-element u8 x s8 sums are vpmaddubsw (pairs into int16) + vpmaddwd by ones (int32):
//   codes <= 63 (every nibble-based scheme): 63 * 127 * 2 = 16002 fits int16, exact;
//   byte codes (<= 255 would saturate int16): signed code c - 128 with the abs/sign trick,
//     maddubs(|c - 128|, sign(q, c - 128)) (|.| <= 128: 128 * 127 * 2 = 32512 fits), and
//     128 * Σq added back per 16 or 32 elements: exact.
// So the int32 sums equal the VNNI kernels' and the fp32 steps after them are the same ops in
// the same order: this kernel gives the VNNI kernels' results bit for bit (tested). Tiles:
// at most 2 rows x 1 panel in registers (16 ymm registers); bigger tiles loop over those, so
// a prefill decodes each weight vector once per 2 rows (slower than VNNI, documented).
#include <cstring>
#include <utility>

#include "kernels/cpu/quant/panel_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

// GCC 12's intrinsics headers (see kernel_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvserve::kernels::cpu::quant {

#ifdef KVS_HAVE_X86
namespace {

#define KVS_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

KVS_AVX2_TARGET inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 4-element sums of u8 codes (<= 63) x s8 activations, into int32 lanes.
KVS_AVX2_TARGET inline __m256i DotSmall(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}
// The same for any u8 code, minus 128 * (sum of the 4 activations): the caller adds that back.
KVS_AVX2_TARGET inline __m256i DotBiased(__m256i w, __m256i x) {
  const __m256i ws = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(ws), _mm256_sign_epi8(x, ws)),
                           _mm256_set1_epi16(1));
}

// Bit `lane` of the 32-bit mask m -> byte lane set to `add` (0 elsewhere).
KVS_AVX2_TARGET inline __m256i MaskBytes(uint32_t m, __m256i add) {
  const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                       2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(m)), idx);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), add);
}

KVS_AVX2_TARGET inline uint32_t Mask32(const uint8_t* p) {
  uint32_t m;
  std::memcpy(&m, p, 4);
  return m;
}

KVS_AVX2_TARGET inline __m256 Half8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
KVS_AVX2_TARGET inline __m256 U8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Panel `panel` (at t.panels + panel * panel_bytes), rows [r0, r0 + NR), into out[NR][16].
template <Codes C, Scales S, int NR>
KVS_AVX2_TARGET void PanelRows(const QTile& t, int panel, int r0, float out[][kPanelRows]) {
  constexpr int kUB = UnitBlocks(S);
  constexpr int kUnit = UnitBytes(C, S);
  constexpr bool kHalf = PerHalfBlock(S);
  constexpr int kI = kHalf ? 2 : 1;
  constexpr bool kBytesC = C == Codes::kBytes;
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(16),
                x30 = _mm256_set1_epi8(0x30);
  const __m256 voff = _mm256_set1_ps(t.format.off);
  const uint8_t* base = t.panels + panel * t.panel_bytes;
  for (int64_t u = 0; u < t.units; ++u) {
    const uint8_t* unit = base + u * kUnit;
    for (int b = 0; b < kUB; ++b) {
      const int64_t kb = u * kUB + b;
      const uint8_t* codes = unit + CodesAt(C, S, b);
      __m256i isum[NR][2][kI];
      for (int r = 0; r < NR; ++r)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < kI; ++i) isum[r][h][i] = _mm256_setzero_si256();
      if constexpr (kBytesC) {
        for (int j = 0; j < 8; ++j) {
          for (int h = 0; h < 2; ++h) {
            const __m256i w =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * j + 32 * h));
            for (int r = 0; r < NR; ++r) {
              const __m256i x = Bcast4(t.xq + (r0 + r) * t.xq_stride + kb * kBlock + 4 * j);
              __m256i& s = isum[r][h][kHalf && j >= 4 ? 1 : 0];
              s = _mm256_add_epi32(s, DotBiased(w, x));
            }
          }
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          for (int h = 0; h < 2; ++h) {
            const __m256i v =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * j + 32 * h));
            __m256i wl = _mm256_and_si256(v, m4);
            __m256i wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (C == Codes::kNibHi1) {
              wl = _mm256_add_epi8(wl, MaskBytes(Mask32(codes + 256 + 8 * j + 4 * h), b4));
              wh = _mm256_add_epi8(wh, MaskBytes(Mask32(codes + 256 + 8 * (j + 4) + 4 * h), b4));
            }
            if constexpr (C == Codes::kNibHi2) {  // crumbs: bits 4..5 of the codes
              const __m256i hv = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(codes + 256 + 64 * (j / 2) + 32 * h));
              const __m256i hl = j % 2 == 0 ? _mm256_slli_epi16(hv, 4) : hv;
              const __m256i hh = j % 2 == 0 ? _mm256_slli_epi16(hv, 2) : _mm256_srli_epi16(hv, 2);
              wl = _mm256_or_si256(wl, _mm256_and_si256(hl, x30));
              wh = _mm256_or_si256(wh, _mm256_and_si256(hh, x30));
            }
            for (int r = 0; r < NR; ++r) {
              const int8_t* xr = t.xq + (r0 + r) * t.xq_stride + kb * kBlock;
              isum[r][h][0] = _mm256_add_epi32(isum[r][h][0], DotSmall(wl, Bcast4(xr + 4 * j)));
              __m256i& s = isum[r][h][kI - 1];
              s = _mm256_add_epi32(s, DotSmall(wh, Bcast4(xr + 16 + 4 * j)));
            }
          }
        }
      }
      const uint8_t* sc = unit + ScalesAt(S, b);
      for (int h = 0; h < 2; ++h) {
        for (int r = 0; r < NR; ++r) {
          const ActBlock& xb = t.xb[(r0 + r) * t.xb_stride + kb];
          if constexpr (kBytesC) {  // add back 128 * Σq (bs*32 = 32 Σq)
            if constexpr (kHalf) {
              isum[r][h][0] = _mm256_add_epi32(isum[r][h][0], _mm256_set1_epi32(4 * xb.bs_lo32));
              isum[r][h][1] = _mm256_add_epi32(isum[r][h][1], _mm256_set1_epi32(4 * xb.bs_hi32));
            } else {
              isum[r][h][0] =
                  _mm256_add_epi32(isum[r][h][0], _mm256_set1_epi32(4 * (xb.bs_lo32 + xb.bs_hi32)));
            }
          }
          const __m256 dx = _mm256_set1_ps(xb.dx);
          __m256& a = acc[r][h];
          if constexpr (S == Scales::kD || S == Scales::kDM || S == Scales::kK ||
                        S == Scales::kAB) {
            __m256 av, bv;
            if constexpr (S == Scales::kD) {
              av = Half8(sc + 16 * h);
              bv = _mm256_mul_ps(av, voff);
            } else if constexpr (S == Scales::kDM) {
              av = Half8(sc + 16 * h);
              bv = Half8(sc + 32 + 16 * h);
            } else if constexpr (S == Scales::kAB) {
              av = _mm256_loadu_ps(reinterpret_cast<const float*>(sc) + 8 * h);
              bv = _mm256_loadu_ps(reinterpret_cast<const float*>(sc) + 16 + 8 * h);
            } else {
              av = _mm256_mul_ps(Half8(unit + 16 * h), U8x8(sc + 8 * h));
              bv = _mm256_sub_ps(_mm256_setzero_ps(),
                                 _mm256_mul_ps(Half8(unit + 32 + 16 * h), U8x8(sc + 16 + 8 * h)));
            }
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h][0]), _mm256_mul_ps(av, dx), a);
            a = _mm256_fmadd_ps(bv, _mm256_set1_ps(xb.sx), a);
          } else if constexpr (S == Scales::kQ6) {
            const __m256i slo =
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8 * h)));
            const __m256i shi = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16 + 8 * h)));
            const __m256i lo = _mm256_sub_epi32(isum[r][h][0], _mm256_set1_epi32(xb.bs_lo32));
            const __m256i hi = _mm256_sub_epi32(isum[r][h][kI - 1], _mm256_set1_epi32(xb.bs_hi32));
            const __m256i s =
                _mm256_add_epi32(_mm256_mullo_epi32(lo, slo), _mm256_mullo_epi32(hi, shi));
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(Half8(unit + 16 * h), dx), a);
          } else {  // kF32
            const float* f = reinterpret_cast<const float*>(sc);
            const __m256 alo = _mm256_loadu_ps(f + 8 * h), ahi = _mm256_loadu_ps(f + 16 + 8 * h);
            const __m256 blo = _mm256_loadu_ps(f + 32 + 8 * h),
                         bhi = _mm256_loadu_ps(f + 48 + 8 * h);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h][0]), _mm256_mul_ps(alo, dx), a);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h][kI - 1]), _mm256_mul_ps(ahi, dx), a);
            a = _mm256_fmadd_ps(blo, _mm256_set1_ps(xb.sx_lo), a);
            a = _mm256_fmadd_ps(bhi, _mm256_set1_ps(xb.sx_hi), a);
          }
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    _mm256_storeu_ps(out[r], acc[r][0]);
    _mm256_storeu_ps(out[r] + 8, acc[r][1]);
  }
}

template <Codes C, Scales S, int R, int P>
KVS_AVX2_TARGET void KernelAvx2(const QTile& t) {
  float out[2][kPanelRows];
  for (int p = 0; p < P; ++p) {
    const int n = t.valid - p * kPanelRows;
    if (n <= 0) break;
    for (int r0 = 0; r0 < R; r0 += 2) {
      const int nr = R - r0 >= 2 ? 2 : 1;
      if (nr == 2) {
        PanelRows<C, S, 2>(t, p, r0, out);
      } else {
        PanelRows<C, S, 1>(t, p, r0, out);
      }
      for (int r = 0; r < nr; ++r) {
        float* yr = t.y + (r0 + r) * t.y_stride + p * kPanelRows;
        const float* bias = t.bias != nullptr ? t.bias + p * kPanelRows : nullptr;
        for (int i = 0; i < n && i < kPanelRows; ++i) {
          float v = out[r][i];
          if (t.accumulate) v = v + yr[i];
          if (bias != nullptr) v = v + bias[i];
          yr[i] = v;
        }
      }
    }
  }
}

template <Codes C, Scales S, int... Rs>
constexpr QKernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  QKernelTable table{};
  ((table.fn[0][Rs] = &KernelAvx2<C, S, Rs + 1, 1>), ...);
  ((table.fn[1][Rs] = Rs < 4 ? &KernelAvx2<C, S, (Rs < 4 ? Rs + 1 : 1), 2> : nullptr), ...);
  table.fn[2][0] = &KernelAvx2<C, S, 1, 4>;
  return table;
}

template <Codes C, Scales S>
const QKernelTable& TableFor() {
  static constexpr QKernelTable kTable =
      MakeTable<C, S>(std::make_integer_sequence<int, kMaxTileRows>{});
  return kTable;
}

}  // namespace

bool CpuHasAvx2() {
  // F16C (vcvtph2ps) comes with every AVX2 + FMA CPU; clang's builtin cannot ask for it.
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

const QKernelTable& Avx2Kernels(const PanelFormat& f) {
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

bool CpuHasAvx2() { return false; }
const QKernelTable& Avx2Kernels(const PanelFormat&) { return PortableKernels(); }

#endif

}  // namespace kvserve::kernels::cpu::quant
