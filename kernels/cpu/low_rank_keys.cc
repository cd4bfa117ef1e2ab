#include "kernels/cpu/low_rank_keys.h"

#include <vector>

#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {

void ProjectKeys(const float* head_basis, int head_dim, int rank, const float* src, int64_t src_stride, int n,
                 float* dst) {
  const float* mu = head_basis;
  const float* u = head_basis + head_dim;  // P
  thread_local std::vector<float> buf;  // one centred row; grows once per thread
  buf.resize(static_cast<size_t>(head_dim));
  float* centred = buf.data();
  for (int r = 0; r < n; ++r) {
    const float* k = src + r * src_stride;
    for (int d = 0; d < head_dim; ++d) centred[d] = k[d] - mu[d];
    float* c = dst + static_cast<int64_t>(r) * rank;
    for (int j = 0; j < rank; ++j) c[j] = simd::Dot(u + static_cast<int64_t>(j) * head_dim, centred, head_dim);
  }
}

void ReconstructKeys(const float* head_basis, int head_dim, int rank, const float* src, int n, float* dst) {
  const float* mu = head_basis;
  const float* u = head_basis + static_cast<int64_t>(1 + rank) * head_dim;  // R
  for (int r = 0; r < n; ++r) {
    const float* c = src + static_cast<int64_t>(r) * rank;
    float* k = dst + static_cast<int64_t>(r) * head_dim;
    for (int d = 0; d < head_dim; ++d) k[d] = mu[d];
    for (int j = 0; j < rank; ++j) {
      const float* uj = u + static_cast<int64_t>(j) * head_dim;
      const float cj = c[j];
      for (int d = 0; d < head_dim; ++d) k[d] += cj * uj[d];
    }
  }
}

float ProjectQuery(const float* head_basis, int head_dim, int rank, const float* q, float* q_r) {
  const float* u = head_basis + static_cast<int64_t>(1 + rank) * head_dim;  // R
  for (int j = 0; j < rank; ++j) q_r[j] = simd::Dot(u + static_cast<int64_t>(j) * head_dim, q, head_dim);
  return simd::Dot(head_basis, q, head_dim);
}

}  // namespace kvserve::kernels::cpu
