#include "kernels/cpu/swiglu.h"

#include <algorithm>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {
namespace {

// silu(g) = g / (1 + exp(-g)) through t = exp(-|g|) <= 1 (simd::ExpNonPositive, the
// attention's polynomial: no overflow for very negative g, no libm call per element):
//   g >= 0: g / (1 + t);   g < 0: g * t / (1 + t).
// Every element takes the same arithmetic wherever it sits in the row (the tail's scalar
// overload runs the same vector code), so a row's result does not depend on the batch.
#define KVS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

inline float SiluTimes(float g, float up) {
  const float t = simd::ExpNonPositive(g < 0.0f ? g : -g);
  return (g < 0.0f ? g * t : g) / (1.0f + t) * up;
}

KVS_SIMD_CLONES void SiluMulRange(const float* gate, const float* up, float* out, int64_t n) {
  using simd::V8;
  const V8 zero = simd::Splat(0.0f), one = simd::Splat(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 g = simd::Load(gate + i);
    const V8 t = simd::ExpNonPositive(g < zero ? g : -g);
    simd::Store(out + i, (g < zero ? g * t : g) / (one + t) * simd::Load(up + i));
  }
  for (; i < n; ++i) out[i] = SiluTimes(gate[i], up[i]);
}

// Below this many elements a parallel region costs more than the exps it spreads.
constexpr int64_t kParallelElems = 16384;
constexpr int64_t kColumnChunk = 1024;

}  // namespace

void SiluMul(const float* gate_up, int64_t rows, int inter, float* out) {
  if (rows * inter < kParallelElems) {
    for (int64_t r = 0; r < rows; ++r) {
      SiluMulRange(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter, inter);
    }
    return;
  }
  if (rows < 4) {
    // A few wide decode rows: split the columns instead.
    const int64_t chunks = (inter + kColumnChunk - 1) / kColumnChunk;
    ParallelFor(rows * chunks, true, [&](int64_t item, int) {
      {
        const int64_t r = item / chunks;
        const int64_t c = item - r * chunks;
        const int64_t begin = c * kColumnChunk;
        const int64_t n = std::min<int64_t>(kColumnChunk, inter - begin);
        const float* row = gate_up + r * 2 * inter;
        SiluMulRange(row + begin, row + inter + begin, out + r * inter + begin, n);
      }
    });
    return;
  }
  ParallelFor(rows, true, [&](int64_t r, int) {
    SiluMulRange(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter, inter);
  });
}

}  // namespace kvserve::kernels::cpu
