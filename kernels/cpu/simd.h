// Eight-float vectors (GCC vector extensions) for the hand-written CPU kernels. In the
// baseline build a V8 op becomes two SSE ops; in a target_clones("arch=x86-64-v3") clone it
// is one AVX2 op. Plain loops with reductions are not vectorized at -O2 (no reassociation),
// so the kernels' inner loops use these instead. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>

// NOTE: everything here is inline and inlined into its caller, so the ABI of passing a
// 32-byte vector by value (which -Wpsabi warns about without AVX) never matters. The
// warning fires at the callers too, so it stays off for the rest of the including .cc
// (kernels/cpu sources only; never include this from a header).
#pragma GCC diagnostic ignored "-Wpsabi"

// KVS_SIMD_CLONES: an AVX2 + FMA clone of a kernel next to the baseline one, picked once at
// load time by an ifunc resolver. Not under ThreadSanitizer: the resolver is instrumented
// and runs during relocation, before the TSan runtime is set up (segfault in
// __tsan_func_entry from SiluMulRange's resolver, clang 14, seen 2026-12-04); a TSan build
// checks synchronisation, not the vector width, so it runs the baseline only.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVS_NO_TARGET_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KVS_NO_TARGET_CLONES 1
#endif
#if defined(KVS_NO_TARGET_CLONES)
#define KVS_SIMD_CLONES
#else
#define KVS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif

// KVS_SIMD_INLINE: GCC does not inline a function compiled for the default target into a
// target_clones clone of another arch (arch=x86-64-v3), so the AVX2 clone of a kernel calls
// the baseline (SSE2) copy of a helper unless the helper is always inlined. SiluMulRow ran
// out of line that way, at ~8 ns per element instead of ~1.5 (a 2048 x 34 row
// microbenchmark), 6-7 % of batch-8 decode on the 124.7 M bench model (docs/benchmarks.md,
// "Profile of the batch-8 miss"). It is elementwise, so where it runs changes no row's
// dependence on the others. The attention helpers (Dot4, Dot4x2, ExpShiftedInPlace,
// WeightedRowSum) stay plain `inline` on purpose: the attention paths' batch invariance is
// tested bit for bit between callers that are clones and callers that are not, and inlined
// into a clone they would be contracted to FMA there only.
#define KVS_SIMD_INLINE __attribute__((always_inline)) inline

namespace kvserve::kernels::cpu::simd {

typedef float V8 __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));

KVS_SIMD_INLINE V8 Load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
KVS_SIMD_INLINE void Store(float* p, const V8& v) { std::memcpy(p, &v, sizeof v); }
KVS_SIMD_INLINE V8 Splat(float x) { return V8{x, x, x, x, x, x, x, x}; }
inline float Sum(const V8& v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

inline float Dot(const float* a, const float* b, int n) {
  V8 acc0 = {}, acc1 = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += Load(a + i) * Load(b + i);
    acc1 += Load(a + i + 8) * Load(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += Load(a + i) * Load(b + i);
  float s = Sum(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

typedef float V4 __attribute__((vector_size(16)));

// The four dot products of `q` with rows k0..k3 (n floats each), sharing one horizontal
// reduction: out[j] = <q, kj>.
inline void Dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3, int n,
                 float* out) {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 qv = Load(q + i);
    a0 += qv * Load(k0 + i);
    a1 += qv * Load(k1 + i);
    a2 += qv * Load(k2 + i);
    a3 += qv * Load(k3 + i);
  }
  // Fold 8 -> 4 lanes, then a transposing pairwise add: lane j of r is the sum of aj.
  const V4 x0 = __builtin_shufflevector(a0, a0, 0, 1, 2, 3) + __builtin_shufflevector(a0, a0, 4, 5, 6, 7);
  const V4 x1 = __builtin_shufflevector(a1, a1, 0, 1, 2, 3) + __builtin_shufflevector(a1, a1, 4, 5, 6, 7);
  const V4 x2 = __builtin_shufflevector(a2, a2, 0, 1, 2, 3) + __builtin_shufflevector(a2, a2, 4, 5, 6, 7);
  const V4 x3 = __builtin_shufflevector(a3, a3, 0, 1, 2, 3) + __builtin_shufflevector(a3, a3, 4, 5, 6, 7);
  const V4 h01 = __builtin_shufflevector(x0, x1, 0, 4, 2, 6) + __builtin_shufflevector(x0, x1, 1, 5, 3, 7);
  const V4 h23 = __builtin_shufflevector(x2, x3, 0, 4, 2, 6) + __builtin_shufflevector(x2, x3, 1, 5, 3, 7);
  V4 r = __builtin_shufflevector(h01, h23, 0, 1, 4, 5) + __builtin_shufflevector(h01, h23, 2, 3, 6, 7);
  for (; i < n; ++i) {
    r[0] += q[i] * k0[i];
    r[1] += q[i] * k1[i];
    r[2] += q[i] * k2[i];
    r[3] += q[i] * k3[i];
  }
  std::memcpy(out, &r, sizeof r);
}

// Dot4 for two query rows qa, qb against the same K rows, sharing the K loads. Each output
// is computed by exactly Dot4's expressions (same accumulation and reduction order), so
// outa/outb equal Dot4(qa, ...)/Dot4(qb, ...) bit for bit.
inline void Dot4x2(const float* qa, const float* qb, const float* k0, const float* k1, const float* k2,
                   const float* k3, int n, float* outa, float* outb) {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 qva = Load(qa + i), qvb = Load(qb + i);
    const V8 l0 = Load(k0 + i), l1 = Load(k1 + i), l2 = Load(k2 + i), l3 = Load(k3 + i);
    a0 += qva * l0;
    a1 += qva * l1;
    a2 += qva * l2;
    a3 += qva * l3;
    b0 += qvb * l0;
    b1 += qvb * l1;
    b2 += qvb * l2;
    b3 += qvb * l3;
  }
  auto fold = [](const V8& x0v, const V8& x1v, const V8& x2v, const V8& x3v) {
    const V4 x0 = __builtin_shufflevector(x0v, x0v, 0, 1, 2, 3) + __builtin_shufflevector(x0v, x0v, 4, 5, 6, 7);
    const V4 x1 = __builtin_shufflevector(x1v, x1v, 0, 1, 2, 3) + __builtin_shufflevector(x1v, x1v, 4, 5, 6, 7);
    const V4 x2 = __builtin_shufflevector(x2v, x2v, 0, 1, 2, 3) + __builtin_shufflevector(x2v, x2v, 4, 5, 6, 7);
    const V4 x3 = __builtin_shufflevector(x3v, x3v, 0, 1, 2, 3) + __builtin_shufflevector(x3v, x3v, 4, 5, 6, 7);
    const V4 h01 = __builtin_shufflevector(x0, x1, 0, 4, 2, 6) + __builtin_shufflevector(x0, x1, 1, 5, 3, 7);
    const V4 h23 = __builtin_shufflevector(x2, x3, 0, 4, 2, 6) + __builtin_shufflevector(x2, x3, 1, 5, 3, 7);
    return V4(__builtin_shufflevector(h01, h23, 0, 1, 4, 5) + __builtin_shufflevector(h01, h23, 2, 3, 6, 7));
  };
  V4 ra = fold(a0, a1, a2, a3), rb = fold(b0, b1, b2, b3);
  for (; i < n; ++i) {
    ra[0] += qa[i] * k0[i];
    ra[1] += qa[i] * k1[i];
    ra[2] += qa[i] * k2[i];
    ra[3] += qa[i] * k3[i];
    rb[0] += qb[i] * k0[i];
    rb[1] += qb[i] * k1[i];
    rb[2] += qb[i] * k2[i];
    rb[3] += qb[i] * k3[i];
  }
  std::memcpy(outa, &ra, sizeof ra);
  std::memcpy(outb, &rb, sizeof rb);
}

// y[i] += alpha * x[i]
inline void Axpy(float alpha, const float* x, float* y, int n) {
  const V8 a = Splat(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) Store(y + i, Load(y + i) + a * Load(x + i));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// y[d] += sum_r p[r] * rows[r * n + d] for d < n: the softmax-weighted sum of n_rows V
// rows, with each 8-wide slice of y held in a register across all rows.
inline void WeightedRowSum(const float* p, const float* rows, int n_rows, int n, float* y) {
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    V8 acc = Load(y + d);
    for (int r = 0; r < n_rows; ++r) acc += Splat(p[r]) * Load(rows + static_cast<int64_t>(r) * n + d);
    Store(y + d, acc);
  }
  for (; d < n; ++d) {
    float acc = y[d];
    for (int r = 0; r < n_rows; ++r) acc += p[r] * rows[static_cast<int64_t>(r) * n + d];
    y[d] = acc;
  }
}

// WeightedRowSum for two weight vectors over the same rows, sharing the row loads; each
// result equals WeightedRowSum's bit for bit (same per-element accumulation order).
inline void WeightedRowSum2(const float* pa, const float* pb, const float* rows, int n_rows, int n, float* ya,
                            float* yb) {
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    V8 acca = Load(ya + d), accb = Load(yb + d);
    for (int r = 0; r < n_rows; ++r) {
      const V8 v = Load(rows + static_cast<int64_t>(r) * n + d);
      acca += Splat(pa[r]) * v;
      accb += Splat(pb[r]) * v;
    }
    Store(ya + d, acca);
    Store(yb + d, accb);
  }
  for (; d < n; ++d) {
    float acca = ya[d], accb = yb[d];
    for (int r = 0; r < n_rows; ++r) {
      acca += pa[r] * rows[static_cast<int64_t>(r) * n + d];
      accb += pb[r] * rows[static_cast<int64_t>(r) * n + d];
    }
    ya[d] = acca;
    yb[d] = accb;
  }
}

// y[i] *= alpha
inline void Scale(float alpha, float* y, int n) {
  const V8 a = Splat(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) Store(y + i, Load(y + i) * a);
  for (; i < n; ++i) y[i] *= alpha;
}

// exp(x) for x <= 0 (softmax arguments): 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2 and p
// the degree-6 Taylor polynomial (relative error < 3e-7). Arguments below -87 flush to
// ~1e-38, as good as 0 next to the running sum (which always holds exp(0) = 1).
KVS_SIMD_INLINE V8 ExpNonPositive(const V8& x_in) {
  const V8 lo = Splat(-87.0f);
  const V8 x = x_in < lo ? lo : x_in;
  // Round to nearest by the 1.5 * 2^23 trick (no SSE4.1 roundps needed).
  const V8 magic = Splat(12582912.0f);
  const V8 n = (x * Splat(1.44269504088896341f) + magic) - magic;
  const V8 r = (x - n * Splat(0.693145751953125f)) - n * Splat(1.42860682030941723e-6f);  // ln2 = hi + lo
  V8 p = Splat(1.0f / 720.0f);
  p = p * r + Splat(1.0f / 120.0f);
  p = p * r + Splat(1.0f / 24.0f);
  p = p * r + Splat(1.0f / 6.0f);
  p = p * r + Splat(0.5f);
  p = p * r + Splat(1.0f);
  p = p * r + Splat(1.0f);
  const V8i bits = (__builtin_convertvector(n, V8i) + 127) << 23;
  return p * (V8)bits;  // same-size vector cast: reinterprets the bits
}

inline float ExpNonPositive(float x) {
  float buf[8] = {x, 0, 0, 0, 0, 0, 0, 0};
  return ExpNonPositive(Load(buf))[0];
}

// out[i] = silu(gate[i]) * up[i] for i < n, silu(g) = g / (1 + exp(-g)) through
// t = exp(-|g|) <= 1 (no overflow for very negative g, no libm call per element):
//   g >= 0: g / (1 + t);   g < 0: g * t / (1 + t).
// The tail runs the same polynomial, so an element's result does not depend on where it
// sits in the row. A void helper (like Dot4): callers in target_clones functions inline it,
// and clang rejects V8 return values at call sites in a clone without AVX.
KVS_SIMD_INLINE void SiluMulRow(const float* gate, const float* up, float* out, int64_t n) {
  const V8 zero = Splat(0.0f), one = Splat(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 g = Load(gate + i);
    const V8 t = ExpNonPositive(g < zero ? g : -g);
    Store(out + i, (g < zero ? g * t : g) / (one + t) * Load(up + i));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float t = ExpNonPositive(g < 0.0f ? g : -g);
    out[i] = (g < 0.0f ? g * t : g) / (1.0f + t) * up[i];
  }
}

// x[i] = exp(x[i] - shift) for i < n (every x[i] <= shift); returns the sum of the results.
inline float ExpShiftedInPlace(float* x, int n, float shift) {
  const V8 s = Splat(shift);
  V8 acc = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 e = ExpNonPositive(Load(x + i) - s);
    Store(x + i, e);
    acc += e;
  }
  float total = Sum(acc);
  for (; i < n; ++i) {
    x[i] = ExpNonPositive(x[i] - shift);
    total += x[i];
  }
  return total;
}

}  // namespace kvserve::kernels::cpu::simd
