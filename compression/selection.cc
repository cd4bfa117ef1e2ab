#include "compression/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace kvserve::compression {

void ZNormalize(std::span<double> s) {
  if (s.empty()) return;
  const double n = static_cast<double>(s.size());
  double mean = 0.0;
  for (double v : s) mean += v;
  mean /= n;
  double var = 0.0;
  for (double v : s) var += (v - mean) * (v - mean);
  const double inv = 1.0 / std::max(std::sqrt(var / n), kMinStd);
  for (double& v : s) v = (v - mean) * inv;
}

void MaxInto(std::span<const double> src, std::span<double> acc) {
  KVS_DCHECK(src.size() == acc.size());
  for (size_t j = 0; j < src.size(); ++j) acc[j] = std::max(acc[j], src[j]);
}

void TopKAscending(std::span<const double> scores, int64_t k, int64_t base, std::span<int32_t> out,
                   std::vector<int32_t>& scratch) {
  const int64_t m = static_cast<int64_t>(scores.size());
  KVS_CHECK(k >= 0 && k <= m && static_cast<int64_t>(out.size()) >= k);
  if (k == 0) return;
  scratch.resize(static_cast<size_t>(m));
  std::iota(scratch.begin(), scratch.end(), 0);
  // A strict total order: higher score first, NaN last, equal scores by lower index.
  auto key = [&](int32_t i) {
    const double v = scores[static_cast<size_t>(i)];
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
  };
  auto better = [&](int32_t a, int32_t b) {
    const double ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    const bool na = std::isnan(scores[static_cast<size_t>(a)]), nb = std::isnan(scores[static_cast<size_t>(b)]);
    if (na != nb) return nb;  // a real -inf beats NaN
    return a < b;
  };
  if (k < m) std::nth_element(scratch.begin(), scratch.begin() + k, scratch.end(), better);
  std::sort(scratch.begin(), scratch.begin() + k);
  for (int64_t i = 0; i < k; ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(base + scratch[static_cast<size_t>(i)]);
}

}  // namespace kvserve::compression
