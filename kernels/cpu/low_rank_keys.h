// Low-rank keys (issue 18, after Loki and Palu): a key k (post-RoPE, head_dim floats) of one
// (layer, KV head) is stored as r coefficients in that head's PCA basis, calibrated offline
// over post-RoPE keys (compression/key_basis.h):
//
//   c = U^T (k - mu)          U: [head_dim][r], orthonormal columns (top-r principal axes)
//   k^ = mu + U c              the projected key: the best rank-r affine fit in the mean square
//   q . k^ = q . mu + (U^T q) . c
//
// so attention scores a low-rank key with the query projected once per (query, head) into the
// r-dim space plus one offset q . mu: exact for the projected key, no reconstruction and r
// instead of head_dim multiply-adds per key. The basis is fitted to keys after RoPE, so keys
// are rotated with their own positions before projection and nothing positional is needed
// afterwards (a position-dependent rotation would not commute with a fixed basis if the basis
// were fitted before RoPE).
//
// Packed basis of one layer, the form the kernels read (float32, per KV head back to back):
//
//   head h at h * LowRankHeadFloats(head_dim, r):  mu [head_dim] | U^T [r][head_dim]
//
// (component j of U contiguous, so projections are r dot products of length head_dim and
// reconstruction is r axpys).
//
// Pure functions of their arguments (ProjectKeys keeps one thread_local row, grown once).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve::kernels::cpu {

inline size_t LowRankHeadFloats(int head_dim, int rank) {
  return static_cast<size_t>(head_dim) * (1 + static_cast<size_t>(rank));
}

// c[j] = U_j . (k - mu) for n rows: src [n][head_dim] (src_stride floats apart), dst [n][rank].
void ProjectKeys(const float* head_basis, int head_dim, int rank, const float* src, int64_t src_stride, int n,
                 float* dst);

// k^ = mu + sum_j c[j] U_j for n rows: src [n][rank], dst [n][head_dim].
void ReconstructKeys(const float* head_basis, int head_dim, int rank, const float* src, int n, float* dst);

// A query's image in the low-rank space: q_r[j] = U_j . q (rank floats) and the offset q . mu,
// so that q . k^ = q_r . c + offset for every key of the head.
float ProjectQuery(const float* head_basis, int head_dim, int rank, const float* q, float* q_r);

}  // namespace kvserve::kernels::cpu
