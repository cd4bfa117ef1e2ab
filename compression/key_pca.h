// PCA of post-RoPE keys per (layer, KV head) for low-rank keys (compression/key_basis.h):
// the calibrator hands over the keys each forward pass wrote into its fp32 cache, this
// accumulates the first and second moments in float64, and Finish turns them into the mean
// and the eigen-decomposition of the covariance (LAPACK, kernels/cpu/sym_eigen.h):
//
//   mu = sum k / n,   C = sum k k^T / n - mu mu^T,   C = U diag(variance) U^T (descending)
//
// Every key row counts once (BOS included, as the TriAttention statistics count every query).
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
  int64_t num_rows(int layer, int head) const { return counts_[static_cast<size_t>(layer) * num_kv_heads_ + head]; }

  // FailedPrecondition when a head saw no rows or heads saw different numbers of rows.
  absl::StatusOr<KeyBasis> Finish(std::span<const float> inv_freq, std::string source) const;

 private:
  int num_layers_, num_kv_heads_, head_dim_;
  std::vector<double> sums_;     // [L][H][head_dim]
  std::vector<double> moments_;  // [L][H][head_dim][head_dim], upper triangle filled
  std::vector<int64_t> counts_;  // [L][H]
};

}  // namespace kvserve::compression
