// Low-rank keys (issue 18, after Loki and Palu): a key k (post-RoPE, head_dim floats) of one
// (layer, KV head) is stored as r coefficients, calibrated offline over post-RoPE keys and
// queries (compression/key_basis.h):
//
//   c = P (k - mu)            P: [r][head_dim], the key projection
//   k^ = mu + R^T c           R: [r][head_dim], the reconstruction; P R^T = I_r, so projecting
//                             k^ again gives c back (a token moved between rounds does not drift)
//   q . k^ = q . mu + (R q) . c
//
// so attention scores a low-rank key with the query projected once per (query, head) into the
// r-dim space (by R) plus one offset q . mu: exact for k^, no reconstruction and r instead of
// head_dim multiply-adds per key. Plain PCA has P = R = U^T (orthonormal top-r axes); the
// query-aware basis (key_basis.h) is oblique: it keeps the directions that move q . k most.
// The basis is fitted after RoPE, so keys are rotated with their own positions before
// projection and nothing positional is needed afterwards (a fixed basis fitted before RoPE
// would not commute with the position-dependent rotation).
//
// Packed basis of one layer, the form the kernels read (float32, per KV head back to back):
//
//   head h at h * LowRankHeadFloats(head_dim, r):  mu [head_dim] | P [r][head_dim] | R [r][head_dim]
//
// Pure functions of their arguments (ProjectKeys keeps one thread_local row, grown once).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve::kernels::cpu {

inline size_t LowRankHeadFloats(int head_dim, int rank) {
  return static_cast<size_t>(head_dim) * (1 + 2 * static_cast<size_t>(rank));
}

// c[j] = P_j . (k - mu) for n rows: src [n][head_dim] (src_stride floats apart), dst [n][rank].
void ProjectKeys(const float* head_basis, int head_dim, int rank, const float* src, int64_t src_stride, int n,
                 float* dst);

// k^ = mu + sum_j c[j] R_j for n rows: src [n][rank], dst [n][head_dim].
void ReconstructKeys(const float* head_basis, int head_dim, int rank, const float* src, int n, float* dst);

// A query's image in the low-rank space: q_r[j] = R_j . q (rank floats) and the offset q . mu,
// so that q . k^ = q_r . c + offset for every key of the head.
float ProjectQuery(const float* head_basis, int head_dim, int rank, const float* q, float* q_r);

}  // namespace kvserve::kernels::cpu
