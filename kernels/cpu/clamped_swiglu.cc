#include "kernels/cpu/clamped_swiglu.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/compute_pool.h"

namespace kvserve::kernels::cpu {
namespace {

// Below this many elements a parallel region costs more than the exps it spreads.
constexpr int64_t kParallelElems = 16384;

void Row(const float* gate, const float* up, int n, float limit, float alpha, float* out) {
  for (int i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  }
}

}  // namespace

void ClampedSwiglu(const float* gate_up, int64_t rows, int inter, float limit, float alpha,
                   float* out) {
  auto row = [&](int64_t r, int) {
    const float* gu = gate_up + r * 2 * inter;
    Row(gu, gu + inter, inter, limit, alpha, out + r * inter);
  };
  // Each element depends on its own inputs only, so the split never changes a result.
  ParallelFor(rows, rows * inter >= kParallelElems, row);
}

}  // namespace kvserve::kernels::cpu
