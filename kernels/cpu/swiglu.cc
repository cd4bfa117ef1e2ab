#include "kernels/cpu/swiglu.h"

#include <algorithm>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {
namespace {

// The row kernel is simd::SiluMulRow, compiled for AVX2 + FMA and for the baseline (simd.h).

KVS_SIMD_CLONES void SiluMulRange(const float* gate, const float* up, float* out, int64_t n) {
  simd::SiluMulRow(gate, up, out, n);
}

// gelu_tanh(g) = g * sigmoid(2z) = g / (1 + e^{-2z}), z = sqrt(2/pi) (g + 0.044715 g^3):
// the same identity as 0.5 g (1 + tanh z). e^{-2z} through t = e^{-2|z|} <= 1, as SiluMulRow
// does, so no element overflows.
KVS_SIMD_CLONES void GeluTanhMulRange(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float z2 = 2.0f * kSqrt2OverPi * (g + 0.044715f * g * g * g);
    const float t = simd::ExpNonPositive(z2 < 0.0f ? z2 : -z2);
    out[i] = (z2 < 0.0f ? g * t : g) / (1.0f + t) * up[i];
  }
}

// Below this many elements a parallel region costs more than the exps it spreads.
constexpr int64_t kParallelElems = 16384;
constexpr int64_t kColumnChunk = 1024;

}  // namespace

namespace {

using RangeFn = void (*)(const float*, const float*, float*, int64_t);

void GatedMul(RangeFn range, const float* gate_up, int64_t rows, int inter, float* out) {
  if (rows * inter < kParallelElems) {
    for (int64_t r = 0; r < rows; ++r) {
      range(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter, inter);
    }
    return;
  }
  if (rows < 4) {
    // A few wide decode rows: split the columns instead.
    const int64_t chunks = (inter + kColumnChunk - 1) / kColumnChunk;
    ParallelFor(rows * chunks, true, [&](int64_t item, int) {
      const int64_t r = item / chunks;
      const int64_t c = item - r * chunks;
      const int64_t begin = c * kColumnChunk;
      const int64_t n = std::min<int64_t>(kColumnChunk, inter - begin);
      const float* row = gate_up + r * 2 * inter;
      range(row + begin, row + inter + begin, out + r * inter + begin, n);
    });
    return;
  }
  ParallelFor(rows, true, [&](int64_t r, int) {
    range(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter, inter);
  });
}

}  // namespace

void SiluMul(const float* gate_up, int64_t rows, int inter, float* out) {
  GatedMul(&SiluMulRange, gate_up, rows, inter, out);
}

void GeluTanhMul(const float* gate_up, int64_t rows, int inter, float* out) {
  GatedMul(&GeluTanhMulRange, gate_up, rows, inter, out);
}

}  // namespace kvserve::kernels::cpu
