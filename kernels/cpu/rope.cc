#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/compute_pool.h"

namespace kvserve::kernels::cpu {
namespace {
// Rows below which the work (a few hundred flops per head) does not pay for a fork/join.
constexpr int64_t kParallelTokens = 64;
// Tokens per chunk of the team (fixed, so results never depend on the thread count).
constexpr int64_t kChunkTokens = 16;
int64_t Chunks(int64_t n) { return (n + kChunkTokens - 1) / kChunkTokens; }
}  // namespace

void RopeCosSin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int half,
                float* cos_sin) {
  ParallelFor(Chunks(num_tokens), num_tokens >= kParallelTokens, [&](int64_t chunk, int) {
  for (int64_t t = chunk * kChunkTokens; t < std::min(num_tokens, (chunk + 1) * kChunkTokens); ++t) {
    float* row = cos_sin + t * 2 * half;
    const double p = positions[t];
    for (int f = 0; f < half; ++f) {
      const double angle = p * static_cast<double>(inv_freq[f]);
      row[f] = static_cast<float>(std::cos(angle));
      row[half + f] = static_cast<float>(std::sin(angle));
    }
  }
  });
}

void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int64_t row_stride,
               const float* cos_sin) {
  ApplyRope(x, num_tokens, num_heads, head_dim, head_dim, row_stride, cos_sin);
}

void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int rotary_dim, int64_t row_stride,
               const float* cos_sin) {
  const int half = rotary_dim / 2;
  ParallelFor(Chunks(num_tokens), num_tokens >= kParallelTokens, [&](int64_t chunk, int) {
  for (int64_t t = chunk * kChunkTokens; t < std::min(num_tokens, (chunk + 1) * kChunkTokens); ++t) {
    const float* c = cos_sin + t * rotary_dim;
    const float* s = c + half;
    for (int h = 0; h < num_heads; ++h) {
      float* lo = x + t * row_stride + static_cast<int64_t>(h) * head_dim;
      float* hi = lo + half;
#pragma omp simd
      for (int f = 0; f < half; ++f) {
        const float a = lo[f];
        const float b = hi[f];
        lo[f] = a * c[f] - b * s[f];
        hi[f] = b * c[f] + a * s[f];
      }
    }
  }
  });
}

}  // namespace kvserve::kernels::cpu
