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
