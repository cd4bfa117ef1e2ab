// AVX-512 tile kernel of PagedAttention: its per-row arithmetic is stated in attention_tile.h.
//
// Layout per block (block_size bs, head_dim hd, chunks = ceil(bs / 16) of 16 entries):
//
//   kt     [chunk][hd][16]          K of the block transposed: lane = entry, so one vector
//                                   FMA advances 16 scores of one unit by one element of d
//   scores [unit][chunk * 16]       scaled scores, then probabilities (0 past a unit's entries)
//   acc    [unit][ceil(hd/16) * 16] running softmax-weighted V sum
//   lsum   [unit][16]               running normaliser, one partial per lane
//   max, new_max, corr  [unit]      running max, this block's max, rescale factor
//
// Scoring broadcasts q[u][d] against a K column vector (a GEMM micro-kernel: up to six units
// x four chains in registers); the weighted V sum keeps up to 8 units x 3 vectors of acc in
// registers while V rows stream past. K is transposed once per (tile, block), so a 16-row
// prefill tile of a GQA group pays it once for 16 * group units; decode (one row) pays it per
// block, which costs about what the 8-wide kernel's horizontal reductions did; the next
// block's K and V runs are prefetched while the current one is scored (decode is bound by
// reading the cache, and the transposing reads of K are strided).
//
// Hot path: no allocation (scratch comes from the caller's workspace, per-unit arrays of the
// tile live on the stack).

// GCC 12 flags the deliberately undefined pass-through operand inside its own AVX-512 shuffle
// intrinsics (GCC bug 105593, fixed in 13) as maybe-uninitialised; nothing of ours is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/check.h"
#include "kernels/cpu/attention_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVS_HAVE_X86 1
#endif

namespace kvserve::kernels::cpu::internal {

#ifdef KVS_HAVE_X86
namespace {

#define KVS_AVX512 __attribute__((target("avx512f,fma")))

constexpr int kLanes = 16;
constexpr size_t kAlign = 16;  // floats: 64-byte spacing of the scratch arrays
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Geometry {
  int hd, bs, chunks, hd_vecs, units;
  size_t score_stride() const { return static_cast<size_t>(chunks) * kLanes; }
  size_t acc_stride() const { return static_cast<size_t>(hd_vecs) * kLanes; }
};

struct Scratch {
  float* k_rows;
  float* v_rows;
  float* kt;
  float* scores;
  float* acc;
  float* lsum;
  float* max;
  float* new_max;
  float* corr;
};

size_t ScratchFloats(const Geometry& g) {
  const size_t run = static_cast<size_t>(g.bs) * g.hd;
  const size_t u = static_cast<size_t>(g.units);
  return 2 * RoundUp(run) + RoundUp(static_cast<size_t>(g.chunks) * kLanes * g.hd) + RoundUp(u * g.score_stride()) +
         RoundUp(u * g.acc_stride()) + RoundUp(u * kLanes) + 3 * RoundUp(u);
}

Scratch Carve(const Geometry& g, float* base) {
  const size_t run = static_cast<size_t>(g.bs) * g.hd;
  const size_t u = static_cast<size_t>(g.units);
  Scratch s;
  s.k_rows = base;
  s.v_rows = s.k_rows + RoundUp(run);
  s.kt = s.v_rows + RoundUp(run);
  s.scores = s.kt + RoundUp(static_cast<size_t>(g.chunks) * kLanes * g.hd);
  s.acc = s.scores + RoundUp(u * g.score_stride());
  s.lsum = s.acc + RoundUp(u * g.acc_stride());
  s.max = s.lsum + RoundUp(u * kLanes);
  s.new_max = s.max + RoundUp(u);
  s.corr = s.new_max + RoundUp(u);
  return s;
}

// Lanes [0, n) of a vector (n clamped to [0, 16]).
inline __mmask16 FirstLanes(int n) {
  if (n >= kLanes) return static_cast<__mmask16>(0xffff);
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

// Lanes of chunk c holding a unit's live entries [lo, n) of the block.
inline __mmask16 LiveLanes(int lo, int n, int c) {
  return static_cast<__mmask16>(FirstLanes(n - c * kLanes) & ~FirstLanes(lo - c * kLanes));
}

// exp(x) for x <= 0: x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2, then 2^n * p(r)
// with p the degree-6 Taylor polynomial in Horner form (relative error < 3e-7). Arguments
// below -87 are raised to -87 (about 1.6e-38: nothing next to a running sum that holds
// exp(0) = 1); -inf and NaN become -87 too.
KVS_AVX512 inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));  // NaN in x -> the second operand
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 = hi + lo
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// kt[d][lane] = k[(row0 + lane) * hd + d] for d < hd, lane < 16; rows at or past `n` read as
// zero (their lanes are masked later; zeros keep stale or uninitialised rows out of the FMAs).
// 16 x 16 blocks: unpack pairs of rows, shuffle 4 x 4 sub-blocks, then swap 128-bit lanes.
KVS_AVX512 void TransposeChunk(const float* k, int row0, int n, int hd, float* kt) {
  for (int d0 = 0; d0 < hd; d0 += kLanes) {
    const int cols = std::min(kLanes, hd - d0);
    const __mmask16 cm = FirstLanes(cols);
    __m512 r[kLanes], t[kLanes];
#pragma GCC unroll 16
    for (int i = 0; i < kLanes; ++i) {
      r[i] = row0 + i < n ? _mm512_maskz_loadu_ps(cm, k + static_cast<int64_t>(row0 + i) * hd + d0)
                          : _mm512_setzero_ps();
    }
#pragma GCC unroll 16
    for (int i = 0; i < kLanes; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // r[4g + m], 128-bit lane L: column 4L + m of rows 4g .. 4g + 3.
#pragma GCC unroll 4
    for (int g = 0; g < kLanes; g += 4) {
      r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
      r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
      r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
      r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512 v01 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
      const __m512 v23 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
      const __m512 w01 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
      const __m512 w23 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
      const __m512 col[4] = {_mm512_shuffle_f32x4(v01, w01, 0x88), _mm512_shuffle_f32x4(v23, w23, 0x88),
                             _mm512_shuffle_f32x4(v01, w01, 0xDD), _mm512_shuffle_f32x4(v23, w23, 0xDD)};
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const int c = 4 * l + m;  // column within this 16-column slab
        if (c < cols) _mm512_storeu_ps(kt + static_cast<int64_t>(d0 + c) * kLanes, col[l]);
      }
    }
  }
}

// Asks for the K and V runs of one block of KV head `head` ahead of their use: a decode row
// spends little arithmetic per byte, and the transposed reads of K are strided.
void PrefetchBlock(const KvTierView& tier, int64_t block, int head) {
  const cache::KvLayout& layout = tier.layout;
  for (int kv = 0; kv < 2; ++kv) {
    const char* run = reinterpret_cast<const char*>(tier.layer_data + layout.run_byte_offset(block, kv, head));
    const size_t bytes = layout.run_bytes(kv);
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(run + off);
  }
}

// Scores of U units against one chunk's transposed K (kt: [hd][16]): four fma chains per
// unit (d mod 4), combined as (c0 + c1) + (c2 + c3).
template <int U>
KVS_AVX512 void ScoreUnits(const float* const* q, const float* kt, int hd, __m512* out) {
  __m512 c[U][4];
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u)
  #pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) c[u][p] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 4 <= hd; d += 4) {
    const __m512 k0 = _mm512_loadu_ps(kt + static_cast<int64_t>(d) * kLanes);
    const __m512 k1 = _mm512_loadu_ps(kt + static_cast<int64_t>(d + 1) * kLanes);
    const __m512 k2 = _mm512_loadu_ps(kt + static_cast<int64_t>(d + 2) * kLanes);
    const __m512 k3 = _mm512_loadu_ps(kt + static_cast<int64_t>(d + 3) * kLanes);
  #pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      c[u][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][d]), k0, c[u][0]);
      c[u][1] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][d + 1]), k1, c[u][1]);
      c[u][2] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][d + 2]), k2, c[u][2]);
      c[u][3] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][d + 3]), k3, c[u][3]);
    }
  }
  for (int p = 0; d + p < hd; ++p) {
    const __m512 kp = _mm512_loadu_ps(kt + static_cast<int64_t>(d + p) * kLanes);
  #pragma GCC unroll 8
    for (int u = 0; u < U; ++u) c[u][p] = _mm512_fmadd_ps(_mm512_set1_ps(q[u][d + p]), kp, c[u][p]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
    out[u] = _mm512_add_ps(_mm512_add_ps(c[u][0], c[u][1]), _mm512_add_ps(c[u][2], c[u][3]));
  }
}

constexpr int kScoreUnits = 6;              // 6 units x 4 chains = 24 accumulators
constexpr int kMaxUnits = kTileRows * 64;  // query heads per KV head: 64 at most

// acc[u] = acc[u] * corr[u] + sum over entries r < n[u] of p[u][r] * v[r] (r ascending) for
// U units and the DV vectors of d starting at vector dv0. Entries below n[0] (the smallest:
// units are in row order) apply to every unit; the rest are masked per unit, so a unit never
// touches an entry past its own.
template <int U, int DV>
KVS_AVX512 void WeightedSum(const float* p, size_t p_stride, const float* v, int hd, int dv0, const int* n,
                            const float* corr, float* acc, size_t acc_stride) {
  __m512 a[U][DV];
  __mmask16 dm[DV];
#pragma GCC unroll 8
  for (int j = 0; j < DV; ++j) dm[j] = FirstLanes(hd - (dv0 + j) * kLanes);
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
    const __m512 cu = _mm512_set1_ps(corr[u]);
  #pragma GCC unroll 8
    for (int j = 0; j < DV; ++j) {
      a[u][j] = _mm512_mul_ps(_mm512_loadu_ps(acc + u * acc_stride + (dv0 + j) * kLanes), cu);
    }
  }
  const float* vd = v + dv0 * kLanes;
  int r = 0;
  for (; r < n[0]; ++r) {
    __m512 vr[DV];
  #pragma GCC unroll 8
    for (int j = 0; j < DV; ++j) vr[j] = _mm512_maskz_loadu_ps(dm[j], vd + static_cast<int64_t>(r) * hd + j * kLanes);
  #pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const __m512 pu = _mm512_set1_ps(p[u * p_stride + r]);
#pragma GCC unroll 8
      for (int j = 0; j < DV; ++j) a[u][j] = _mm512_fmadd_ps(pu, vr[j], a[u][j]);
    }
  }
  for (; r < n[U - 1]; ++r) {
    __m512 vr[DV];
  #pragma GCC unroll 8
    for (int j = 0; j < DV; ++j) vr[j] = _mm512_maskz_loadu_ps(dm[j], vd + static_cast<int64_t>(r) * hd + j * kLanes);
  #pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const __mmask16 live = r < n[u] ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>(0);
      const __m512 pu = _mm512_set1_ps(p[u * p_stride + r]);
#pragma GCC unroll 8
      for (int j = 0; j < DV; ++j) a[u][j] = _mm512_mask3_fmadd_ps(pu, vr[j], a[u][j], live);
    }
  }
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
  #pragma GCC unroll 8
    for (int j = 0; j < DV; ++j) _mm512_storeu_ps(acc + u * acc_stride + (dv0 + j) * kLanes, a[u][j]);
  }
}

using WeightedSumFn = void (*)(const float*, size_t, const float*, int, int, const int*, const float*, float*, size_t);

// Units per call for DV vectors of d: about 24 accumulators.
constexpr int SumUnits(int dv) { return dv == 1 ? 8 : 24 / dv; }

template <int DV, int... Us>
constexpr auto SumTable(std::integer_sequence<int, Us...>) {
  struct T {
    WeightedSumFn fn[sizeof...(Us)];
  };
  return T{{&WeightedSum<Us + 1, DV>...}};
}

// fn(units in this call, DV) for 1 <= units <= SumUnits(DV), DV in 1..4.
WeightedSumFn PickWeightedSum(int units, int dv) {
  static constexpr auto t1 = SumTable<1>(std::make_integer_sequence<int, SumUnits(1)>{});
  static constexpr auto t2 = SumTable<2>(std::make_integer_sequence<int, SumUnits(2)>{});
  static constexpr auto t3 = SumTable<3>(std::make_integer_sequence<int, SumUnits(3)>{});
  static constexpr auto t4 = SumTable<4>(std::make_integer_sequence<int, SumUnits(4)>{});
  switch (dv) {
    case 1: return t1.fn[units - 1];
    case 2: return t2.fn[units - 1];
    case 3: return t3.fn[units - 1];
    default: return t4.fn[units - 1];
  }
}

KVS_AVX512 void ScoreBlock(const Geometry& geo, const float* const* q_ptrs, int u0, int u1, const int* lo,
                           const int* n, int n_max, float scale, const Scratch& ws) {
  const __m512 sc = _mm512_set1_ps(scale);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const int live_chunks = (n_max + kLanes - 1) / kLanes;
  for (int c = 0; c < live_chunks; ++c) {
    const float* kt = ws.kt + static_cast<size_t>(c) * kLanes * geo.hd;
    for (int u = u0; u < u1; u += kScoreUnits) {
      const int m = std::min(kScoreUnits, u1 - u);
      __m512 s[kScoreUnits];
      switch (m) {
        case 1: ScoreUnits<1>(q_ptrs + u, kt, geo.hd, s); break;
        case 2: ScoreUnits<2>(q_ptrs + u, kt, geo.hd, s); break;
        case 3: ScoreUnits<3>(q_ptrs + u, kt, geo.hd, s); break;
        case 4: ScoreUnits<4>(q_ptrs + u, kt, geo.hd, s); break;
        case 5: ScoreUnits<5>(q_ptrs + u, kt, geo.hd, s); break;
        default: ScoreUnits<6>(q_ptrs + u, kt, geo.hd, s); break;
      }
      for (int i = 0; i < m; ++i) {
        const __mmask16 live = LiveLanes(lo[u + i], n[u + i], c);
        const __m512 v = _mm512_mask_mov_ps(neg_inf, live, _mm512_mul_ps(s[i], sc));
        _mm512_storeu_ps(ws.scores + (u + i) * geo.score_stride() + c * kLanes, v);
      }
    }
  }
}

// Online-softmax update of units [u0, units) for one block: new max, correction factors,
// probabilities in place of the scores, lane sums.
KVS_AVX512 void SoftmaxBlock(const Geometry& geo, int u0, int u1, const int* lo, const int* n, const Scratch& ws) {
  for (int u = u0; u < u1; ++u) {
    const float* s = ws.scores + u * geo.score_stride();
    const int nc = (n[u] + kLanes - 1) / kLanes;
    __m512 m = _mm512_loadu_ps(s);
    for (int c = 1; c < nc; ++c) m = _mm512_max_ps(m, _mm512_loadu_ps(s + c * kLanes));
    ws.new_max[u] = std::max(ws.max[u], _mm512_reduce_max_ps(m));
  }
  for (int u = u0; u < u1; u += kLanes) {
    const __mmask16 live = FirstLanes(u1 - u);
    const __m512 old_max = _mm512_maskz_loadu_ps(live, ws.max + u);
    const __m512 new_max = _mm512_maskz_loadu_ps(live, ws.new_max + u);
    _mm512_mask_storeu_ps(ws.corr + u, live, Exp(_mm512_sub_ps(old_max, new_max)));
    _mm512_mask_storeu_ps(ws.max + u, live, new_max);
  }
  for (int u = u0; u < u1; ++u) {
    float* s = ws.scores + u * geo.score_stride();
    float* l = ws.lsum + u * kLanes;
    const int nc = (n[u] + kLanes - 1) / kLanes;
    const __m512 mx = _mm512_set1_ps(ws.max[u]);
    __m512 lv = _mm512_loadu_ps(l);
    for (int c = 0; c < nc; ++c) {
      const __m512 e = _mm512_maskz_mov_ps(LiveLanes(lo[u], n[u], c), Exp(_mm512_sub_ps(_mm512_loadu_ps(s + c * kLanes), mx)));
      _mm512_storeu_ps(s + c * kLanes, e);
      lv = c == 0 ? _mm512_fmadd_ps(lv, _mm512_set1_ps(ws.corr[u]), e) : _mm512_add_ps(lv, e);
    }
    _mm512_storeu_ps(l, lv);
  }
}

KVS_AVX512 void AttendTileImpl(const AttnArgs& a, int s, int64_t j0, int rows, int g, float* scratch, float* out,
                               int64_t out_stride, float* lse) {
  const cache::KvLayout& layout = a.layout;
  const int group = a.group;
  Geometry geo;
  geo.hd = layout.head_dim;
  geo.bs = layout.block_size;
  geo.chunks = (geo.bs + kLanes - 1) / kLanes;
  geo.hd_vecs = (geo.hd + kLanes - 1) / kLanes;
  geo.units = rows * group;
  const int64_t first = a.seqs.seq_starts[s];
  const int64_t n_s = a.seqs.seq_starts[s + 1] - first;
  const int64_t base = a.seqs.kv_lens[s] - n_s;  // row j attends [0, base + j + 1)
  KVS_DCHECK(base >= 0, "seq ", s, ": kv_len ", a.seqs.kv_lens[s], " < rows ", n_s);
  const int32_t* table = a.seqs.block_tables + a.seqs.block_table_offsets[s];
  const Scratch ws = Carve(geo, scratch);

  const float* q_ptrs[kMaxUnits];
  KVS_CHECK(geo.units <= kMaxUnits, "attention: group of ", group, " query heads per KV head (at most ",
            kMaxUnits / kTileRows, ")");
  for (int u = 0; u < geo.units; ++u) {
    q_ptrs[u] = a.q + (first + j0 + u / group) * a.q_stride + static_cast<int64_t>(g * group + u % group) * geo.hd;
  }
  std::fill(ws.acc, ws.acc + geo.units * geo.acc_stride(), 0.0f);
  std::fill(ws.lsum, ws.lsum + geo.units * kLanes, 0.0f);
  std::fill(ws.max, ws.max + geo.units, -std::numeric_limits<float>::infinity());

  int n[kMaxUnits];
  int lo[kMaxUnits];  // per unit: the first live entry of the current block (its window's start)
  const int64_t num_blocks = (base + j0 + rows + geo.bs - 1) / geo.bs;  // the last row's length, in blocks
  const int64_t first_block = a.Lo(base, j0) / geo.bs;  // blocks before every row's window are not read
  auto prefetch = [&](int64_t b) {
    const int32_t entry = table[b];
    PrefetchBlock(a.tiers[KvTierOf(entry)], KvTierBlock(entry), g);
  };
  prefetch(first_block);
  int r1 = 0;  // rows [0, r1) have a window that starts before the current block's end
  for (int64_t b = first_block; b < num_blocks; ++b) {
    if (b + 1 < num_blocks) prefetch(b + 1);
    // Units see a growing prefix: the first unit that sees block b, and each unit's count.
    const int r0 = static_cast<int>(std::max<int64_t>(0, b * geo.bs - base - j0));
    while (r1 < rows && a.Lo(base, j0 + r1) < (b + 1) * geo.bs) ++r1;
    const int u0 = r0 * group;
    const int u1 = r1 * group;
    for (int r = r0; r < r1; ++r) {
      const int nr = static_cast<int>(std::min<int64_t>(geo.bs, base + j0 + r + 1 - b * geo.bs));
      const int lr = static_cast<int>(std::max<int64_t>(0, a.Lo(base, j0 + r) - b * geo.bs));
      std::fill(n + r * group, n + (r + 1) * group, nr);
      std::fill(lo + r * group, lo + (r + 1) * group, lr);
    }
    const int n_max = n[u1 - 1];
    const int64_t block = table[b];
    const KvTierView& tier = a.tiers[KvTierOf(static_cast<int32_t>(block))];
    const int64_t tb = KvTierBlock(static_cast<int32_t>(block));

    const float* k = LoadRun(tier, tb, 0, g, n_max, ws.k_rows);
    for (int c = 0; c * kLanes < n_max; ++c) {
      TransposeChunk(k, c * kLanes, n_max, geo.hd, ws.kt + static_cast<size_t>(c) * kLanes * geo.hd);
    }
    ScoreBlock(geo, q_ptrs, u0, u1, lo, n, n_max, a.scale, ws);
    if (a.variant.softcap > 0.0f) {
      for (int u = u0; u < u1; ++u) SoftcapScores(ws.scores + u * geo.score_stride(), lo[u], n[u], a.variant.softcap);
    }
    SoftmaxBlock(geo, u0, u1, lo, n, ws);

    const float* v = LoadRun(tier, tb, 1, g, n_max, ws.v_rows);
    for (int dv0 = 0; dv0 < geo.hd_vecs; dv0 += 4) {
      const int dv = std::min(4, geo.hd_vecs - dv0);
      const int per_call = SumUnits(dv);
      for (int u = u0; u < u1; u += per_call) {
        const int m = std::min(per_call, u1 - u);
        PickWeightedSum(m, dv)(ws.scores + u * geo.score_stride(), geo.score_stride(), v, geo.hd, dv0, n + u,
                               ws.corr + u, ws.acc + u * geo.acc_stride(), geo.acc_stride());
      }
    }
  }

  for (int u = 0; u < geo.units; ++u) {
    const int64_t row = first + j0 + u / group;
    const int h = g * group + u % group;
    float l[kLanes];
    std::memcpy(l, ws.lsum + u * kLanes, sizeof l);
    for (int w = kLanes / 2; w >= 1; w /= 2) {
      for (int i = 0; i < w; ++i) l[i] = l[i] + l[i + w];
    }
    const float sink = a.variant.sinks != nullptr ? a.variant.sinks[h] : -std::numeric_limits<float>::infinity();
    const __m512 inv =
        _mm512_set1_ps(FinishSoftmax(ws.max[u], l[0], sink, lse != nullptr ? lse + row * a.num_heads + h : nullptr));
    const float* acc = ws.acc + u * geo.acc_stride();
    float* o = out + row * out_stride + static_cast<int64_t>(h) * geo.hd;
    for (int j = 0; j < geo.hd_vecs; ++j) {
      _mm512_mask_storeu_ps(o + j * kLanes, FirstLanes(geo.hd - j * kLanes),
                            _mm512_mul_ps(_mm512_loadu_ps(acc + j * kLanes), inv));
    }
  }
}

}  // namespace

bool Avx512TileAvailable() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

size_t Avx512TileFloats(const cache::KvLayout& layout, int group) {
  if (!Avx512TileAvailable()) return 0;
  Geometry geo;
  geo.hd = layout.head_dim;
  geo.bs = layout.block_size;
  geo.chunks = (geo.bs + kLanes - 1) / kLanes;
  geo.hd_vecs = (geo.hd + kLanes - 1) / kLanes;
  geo.units = kTileRows * group;
  return ScratchFloats(geo);
}

void AttendTileAvx512(const AttnArgs& a, int s, int64_t j0, int rows, int g, float* scratch, float* out,
                      int64_t out_stride, float* lse) {
  AttendTileImpl(a, s, j0, rows, g, scratch, out, out_stride, lse);
}

#else  // no x86: the portable kernel only

bool Avx512TileAvailable() { return false; }
size_t Avx512TileFloats(const cache::KvLayout&, int) { return 0; }
void AttendTileAvx512(const AttnArgs&, int, int64_t, int, int, float*, float*, int64_t, float*) {
  KVS_CHECK(false, "AVX-512 attention kernel called without x86");
}

#endif

}  // namespace kvserve::kernels::cpu::internal
