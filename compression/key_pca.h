// PCA of post-RoPE keys per (layer, KV head) for low-rank keys (compression/key_basis.h):
// the calibrator hands over the keys each forward pass wrote into its fp32 cache and the
// queries of the step rotated by their positions; this accumulates the key moments and the
// query second moment in float64, and Finish turns them into the mean, the eigen-decomposition
// of the key covariance (LAPACK, kernels/cpu/sym_eigen.h) and E[q q^T]:
//
//   mu = sum k / n,   C = sum k k^T / n - mu mu^T,   C = U diag(variance) U^T (descending)
//   S = sum q q^T / n_q   over every query row of the KV head's group of query heads
//
// Every key and query row counts once (BOS included, as the TriAttention statistics count
// every query).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/key_basis.h"

namespace kvserve::compression {

class KeyCovarianceAccumulator {
 public:
  KeyCovarianceAccumulator(int num_layers, int num_kv_heads, int head_dim);

  // keys: [num_rows][head_dim] floats, `stride` apart: post-RoPE keys of (layer, head).
  void Add(int layer, int head, const float* keys, int64_t stride, int64_t num_rows);
  // queries: [num_rows][head_dim], `stride` apart: post-RoPE queries of one query head of
  // KV head `head`'s group.
  void AddQueries(int layer, int head, const float* queries, int64_t stride, int64_t num_rows);
  int64_t num_rows(int layer, int head) const { return counts_[static_cast<size_t>(layer) * num_kv_heads_ + head]; }

  // FailedPrecondition when a head saw no key or query rows or heads saw different numbers.
  absl::StatusOr<KeyBasis> Finish(std::span<const float> inv_freq, std::string source) const;

 private:
  int num_layers_, num_kv_heads_, head_dim_;
  std::vector<double> sums_;     // [L][H][head_dim]
  std::vector<double> moments_;  // [L][H][head_dim][head_dim], upper triangle filled
  std::vector<int64_t> counts_;  // [L][H]
  std::vector<double> query_moments_;  // [L][H][head_dim][head_dim], upper triangle filled
  std::vector<int64_t> query_counts_;  // [L][H]
};

}  // namespace kvserve::compression
