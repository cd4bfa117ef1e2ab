// Score post-processing shared by the score-based policies: per-head z-normalisation, GQA
// pooling, guards and a deterministic top-K.
//
//   per (layer, query head) h:  S_h[j], j over the candidates       (policy's scorer)
//   z-normalise:                Z_h = (S_h - mean) / max(std, 1e-6)  (population std)
//   pool a KV group:            R[j] = max over h in the group Z_h[j]   (or mean, SnapKV)
//   guards:                     R[j] = +inf for slots that must stay (recent window, sinks)
//   select:                     top-K of R, ties -> lowest slot, NaN ranks lowest,
//                               emitted in ascending slot order
//
// Scores are float64 throughout: the CPU reference is the yardstick for other backends.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::compression {

inline constexpr double kMinStd = 1e-6;

// In place: (s - mean) / max(population std, kMinStd). Empty input is left alone.
void ZNormalize(std::span<double> scores);

// acc[j] = max(acc[j], src[j]).
void MaxInto(std::span<const double> src, std::span<double> acc);

// Writes the indices (plus `base`) of the k largest scores into out[0, k), ascending. Ties
// go to the lower index; NaN compares below everything. `scratch` is reused between calls.
void TopKAscending(std::span<const double> scores, int64_t k, int64_t base, std::span<int32_t> out,
                   std::vector<int32_t>& scratch);

}  // namespace kvserve::compression
