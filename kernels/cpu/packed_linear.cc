#include "kernels/cpu/packed_linear.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"  // HalfToFloat (portable fp16 kernel)

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

namespace kvserve::kernels::cpu {
namespace {

constexpr int kW = kPanelWidth;
// Work per chunk and the most chunks one call is cut into (shape-only, see the header).
constexpr int64_t kChunkMacs = 1 << 16;
constexpr int64_t kMaxChunks = 32;

// Output tile of one kernel call: rows [0, R) of x/y, panels [0, P) starting at `pk`.
struct Tile {
  const float* x;
  int64_t x_stride;
  const void* pk;         // first panel (float or bf16 elements)
  int64_t panel_elems;    // in * 16
  int in;
  float* y;               // first output column of the first panel
  int64_t y_stride;
  const float* bias;      // at the first output column, or nullptr
  int valid;              // output columns of these panels that exist (<= P * 16)
  bool accumulate;
};

// ---- portable kernel: 16-lane vector extension, separate mul and add (-ffp-contract=off) ----
typedef float V16 __attribute__((vector_size(64), aligned(4)));

// Weight element kinds: float, uint16_t (bf16 bits) and Fp16 (a tag: fp16 bits held in
// uint16_t). Elem<WT> is the stored type.
struct Fp16 {};
template <typename WT>
using Elem = std::conditional_t<std::is_same_v<WT, Fp16>, uint16_t, WT>;

// bf16 -> fp32 is exact: the bf16 bits are the top half of the fp32 bits.
inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename WT>
inline V16 LoadPanelRow(const Elem<WT>* p) {
  V16 v;
  if constexpr (std::is_same_v<WT, float>) {
    std::memcpy(&v, p, sizeof(V16));
  } else if constexpr (std::is_same_v<WT, Fp16>) {
    for (int i = 0; i < kW; ++i) v[i] = HalfToFloat(p[i]);  // exact, subnormals included
  } else {
    for (int i = 0; i < kW; ++i) v[i] = Bf16ToF32(p[i]);
  }
  return v;
}

template <int R, int P, typename WT>
void KernelPortable(const Tile& t) {
  const Elem<WT>* pk = static_cast<const Elem<WT>*>(t.pk);
  V16 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = V16{};
  for (int k = 0; k < t.in; ++k) {
    V16 w[P];
    for (int p = 0; p < P; ++p) w[p] = LoadPanelRow<WT>(pk + p * t.panel_elems + static_cast<int64_t>(k) * kW);
    for (int r = 0; r < R; ++r) {
      const float xv = t.x[r * t.x_stride + k];
      for (int p = 0; p < P; ++p) acc[r][p] = acc[r][p] + xv * w[p];
    }
  }
  for (int r = 0; r < R; ++r) {
    float* yr = t.y + r * t.y_stride;
    for (int p = 0; p < P; ++p) {
      const int n = std::min(kW, t.valid - p * kW);
      for (int i = 0; i < n; ++i) {
        float v = acc[r][p][i];
        if (t.accumulate) v = v + yr[p * kW + i];
        if (t.bias != nullptr) v = v + t.bias[p * kW + i];
        yr[p * kW + i] = v;
      }
    }
  }
}

#ifdef KVS_HAVE_X86
// ---- AVX-512 kernel ----
template <typename WT>
__attribute__((target("avx512f,fma"))) inline __m512 LoadPanelRow512(const Elem<WT>* p) {
  if constexpr (std::is_same_v<WT, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<WT, Fp16>) {
    // vcvtph2ps (AVX-512F): every fp16 value, subnormals included, is exact in fp32.
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    // Widen 16 bf16 to 32 bits and shift into the top half: exact fp32 values.
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <int R, int P, typename WT>
__attribute__((target("avx512f,fma"))) void KernelAvx512(const Tile& t) {
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const Elem<WT>* pk = static_cast<const Elem<WT>*>(t.pk);
  for (int k = 0; k < t.in; ++k) {
    __m512 w[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) w[p] = LoadPanelRow512<WT>(pk + p * t.panel_elems);
    pk += kW;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(t.x[r * t.x_stride + k]);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xb, w[p], acc[r][p]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* yr = t.y + r * t.y_stride;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const int n = std::min(kW, t.valid - p * kW);
      if (n <= 0) continue;
      const __mmask16 m = n >= kW ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
      __m512 v = acc[r][p];
      if (t.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yr + p * kW));
      if (t.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.bias + p * kW));
      _mm512_mask_storeu_ps(yr + p * kW, m, v);
    }
  }
}
#endif

using KernelFn = void (*)(const Tile&);
constexpr int kMaxRowsWide = 4;     // rows per call with P = 4
constexpr int kMaxRowsNarrow = 12;  // rows per call with P = 2 or 1

// Table [P index][R - 1] of one kernel family; P index: 0 -> 1 panel, 1 -> 2, 2 -> 4.
struct KernelTable {
  KernelFn fn[3][kMaxRowsNarrow];
};

template <template <int, int> class K, int... Rs>
constexpr KernelTable MakeTable(std::integer_sequence<int, Rs...>) {
  KernelTable t{};
  ((t.fn[0][Rs] = &K<Rs + 1, 1>::Run), ...);
  ((t.fn[1][Rs] = &K<Rs + 1, 2>::Run), ...);
  ((t.fn[2][Rs] = Rs < kMaxRowsWide ? &K<(Rs < kMaxRowsWide ? Rs + 1 : 1), 4>::Run : nullptr), ...);
  return t;
}

template <typename WT>
struct Portable {
  template <int R, int P>
  struct K {
    static void Run(const Tile& t) { KernelPortable<R, P, WT>(t); }
  };
};
#ifdef KVS_HAVE_X86
template <typename WT>
struct Avx512 {
  template <int R, int P>
  struct K {
    static void Run(const Tile& t) { KernelAvx512<R, P, WT>(t); }
  };
};
#endif

template <typename WT>
const KernelTable& PortableKernels() {
  static const KernelTable table =
      MakeTable<Portable<WT>::template K>(std::make_integer_sequence<int, kMaxRowsNarrow>{});
  return table;
}

template <typename WT>
const KernelTable& Kernels() {
  // Picked once per process from the CPU's features (never mixed, see the header).
  static const KernelTable table = [] {
#ifdef KVS_HAVE_X86
    if (__builtin_cpu_supports("avx512f")) {
      return MakeTable<Avx512<WT>::template K>(std::make_integer_sequence<int, kMaxRowsNarrow>{});
    }
#endif
    return MakeTable<Portable<WT>::template K>(std::make_integer_sequence<int, kMaxRowsNarrow>{});
  }();
  return table;
}

bool UsesAvx512() {
#ifdef KVS_HAVE_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

int PIndex(int p) { return p == 4 ? 2 : p - 1; }

// Panels [p0, p1) for all rows, `group` panels per call (the last call may take fewer).
template <typename E>
void RunPanels(const KernelTable& kt, const float* x, int64_t x_stride, const E* packed, const float* bias,
               float* y, int64_t y_stride, int64_t rows, int in, int out, bool accumulate, int p0, int p1,
               int group) {
  const int64_t panel_elems = static_cast<int64_t>(in) * kW;
  const int max_rows = group == 4 ? kMaxRowsWide : kMaxRowsNarrow;
  for (int p = p0; p < p1;) {
    int np = std::min(group, p1 - p);
    if (np == 3) np = 2;  // kernels exist for 1, 2 and 4 panels
    const int col = p * kW;
    for (int64_t r0 = 0; r0 < rows; r0 += max_rows) {
      const int nr = static_cast<int>(std::min<int64_t>(max_rows, rows - r0));
      const Tile t{x + r0 * x_stride, x_stride,      packed + p * panel_elems, panel_elems,
                   in,                y + r0 * y_stride + col, y_stride,
                   bias != nullptr ? bias + col : nullptr,     std::min(np * kW, out - col), accumulate};
      kt.fn[PIndex(np)][nr - 1](t);
    }
    p += np;
  }
}

}  // namespace

size_t PackedLinearFloats(int out_features, int in_features) {
  const size_t panels = (static_cast<size_t>(out_features) + kW - 1) / kW;
  return panels * static_cast<size_t>(in_features) * kW;
}

namespace {
template <typename WT>
void Pack(const WT* w, int out_features, int in_features, WT* packed) {
  const int panels = (out_features + kW - 1) / kW;
  for (int p = 0; p < panels; ++p) {
    WT* dst = packed + static_cast<int64_t>(p) * in_features * kW;
    for (int k = 0; k < in_features; ++k) {
      for (int i = 0; i < kW; ++i) {
        const int o = p * kW + i;
        dst[static_cast<int64_t>(k) * kW + i] = o < out_features ? w[static_cast<int64_t>(o) * in_features + k] : WT{0};
      }
    }
  }
}
}  // namespace

void PackLinearWeights(const float* w, int out_features, int in_features, float* packed) {
  Pack(w, out_features, in_features, packed);
}

void PackLinearWeightsBf16(const uint16_t* w, int out_features, int in_features, uint16_t* packed) {
  Pack(w, out_features, in_features, packed);
}

void PackLinearWeightsFp16(const uint16_t* w, int out_features, int in_features, uint16_t* packed) {
  Pack(w, out_features, in_features, packed);
}

const char* PackedLinearKernelName() { return UsesAvx512() ? "avx512" : "portable"; }

namespace {

template <typename E>
void PackedLinearWith(const KernelTable& kt, const float* x, int64_t x_stride, const E* packed,
                      const float* bias, float* y, int64_t y_stride, int64_t rows, int in_features,
                      int out_features, bool accumulate) {
  if (rows <= 0 || out_features <= 0) return;
  const int panels = (out_features + kW - 1) / kW;
  const int group = rows <= kMaxRowsWide ? 4 : 2;
  const int groups = (panels + group - 1) / group;
  const int64_t macs = rows * in_features * static_cast<int64_t>(out_features);
  const int64_t chunks = std::clamp<int64_t>(macs / kChunkMacs, 1, std::min<int64_t>(groups, kMaxChunks));
  ParallelFor(chunks, SplitFor(macs), [&](int64_t c, int) {
    const int p0 = static_cast<int>(groups * c / chunks) * group;
    const int p1 = std::min(panels, static_cast<int>(groups * (c + 1) / chunks) * group);
    RunPanels(kt, x, x_stride, packed, bias, y, y_stride, rows, in_features, out_features, accumulate, p0, p1,
              group);
  });
}

}  // namespace

void PackedLinear(const float* x, int64_t x_stride, const float* packed, const float* bias, float* y,
                  int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(Kernels<float>(), x, x_stride, packed, bias, y, y_stride, rows, in_features, out_features,
                   accumulate);
}

void PackedLinearBf16(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                      int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(Kernels<uint16_t>(), x, x_stride, packed, bias, y, y_stride, rows, in_features, out_features,
                   accumulate);
}

void PackedLinearFp16(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                      int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(Kernels<Fp16>(), x, x_stride, packed, bias, y, y_stride, rows, in_features, out_features,
                   accumulate);
}

namespace internal {
void PackedLinearPortable(const float* x, int64_t x_stride, const float* packed, const float* bias, float* y,
                          int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(PortableKernels<float>(), x, x_stride, packed, bias, y, y_stride, rows, in_features,
                   out_features, accumulate);
}
void PackedLinearBf16Portable(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                              int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(PortableKernels<uint16_t>(), x, x_stride, packed, bias, y, y_stride, rows, in_features,
                   out_features, accumulate);
}
void PackedLinearFp16Portable(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                              int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate) {
  PackedLinearWith(PortableKernels<Fp16>(), x, x_stride, packed, bias, y, y_stride, rows, in_features,
                   out_features, accumulate);
}
}  // namespace internal

}  // namespace kvserve::kernels::cpu
