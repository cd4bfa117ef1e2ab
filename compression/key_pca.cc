#include "compression/key_pca.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/sym_eigen.h"

namespace kvserve::compression {

KeyCovarianceAccumulator::KeyCovarianceAccumulator(int num_layers, int num_kv_heads, int head_dim)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      sums_(static_cast<size_t>(num_layers) * num_kv_heads * head_dim, 0.0),
      moments_(static_cast<size_t>(num_layers) * num_kv_heads * head_dim * head_dim, 0.0),
      counts_(static_cast<size_t>(num_layers) * num_kv_heads, 0),
      query_moments_(static_cast<size_t>(num_layers) * num_kv_heads * head_dim * head_dim, 0.0),
      query_counts_(static_cast<size_t>(num_layers) * num_kv_heads, 0) {
  KVS_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
}

namespace {

// Adds each row x of `rows` (num_rows rows of hd floats, `stride` apart) to the upper
// triangle of the hd x hd moment matrix m (m[i][j] += x_i x_j, j >= i) and, when `sums` is
// not null, to sums. Doubles: calibration sums millions of rows.
void AccumulateMoments(const float* rows, int64_t stride, int64_t num_rows, size_t hd, double* sums, double* m) {
  std::vector<double> x(hd);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = rows + r * stride;
    for (size_t d = 0; d < hd; ++d) x[d] = row[d];
    for (size_t i = 0; i < hd; ++i) {
      if (sums != nullptr) sums[i] += x[i];
      double* mi = m + i * hd;
      const double xi = x[i];
      for (size_t j = i; j < hd; ++j) mi[j] += xi * x[j];
    }
  }
}

// Every (layer, KV head) must have seen the same, non-zero number of `what` rows.
absl::Status CheckEqualCounts(const std::vector<int64_t>& counts, const char* what) {
  const int64_t n = counts.front();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0 || counts[i] != n) {
      return absl::FailedPreconditionError(
          absl::StrCat("key PCA: (layer, KV head) ", i, " saw ", counts[i], " ", what, " rows, the first saw ", n));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void KeyCovarianceAccumulator::Add(int layer, int head, const float* keys, int64_t stride, int64_t num_rows) {
  KVS_CHECK(layer >= 0 && layer < num_layers_ && head >= 0 && head < num_kv_heads_);
  const size_t idx = static_cast<size_t>(layer) * num_kv_heads_ + head;
  const size_t hd = static_cast<size_t>(head_dim_);
  AccumulateMoments(keys, stride, num_rows, hd, sums_.data() + idx * hd, moments_.data() + idx * hd * hd);
  counts_[idx] += num_rows;
}

void KeyCovarianceAccumulator::AddQueries(int layer, int head, const float* queries, int64_t stride,
                                          int64_t num_rows) {
  KVS_CHECK(layer >= 0 && layer < num_layers_ && head >= 0 && head < num_kv_heads_);
  const size_t idx = static_cast<size_t>(layer) * num_kv_heads_ + head;
  const size_t hd = static_cast<size_t>(head_dim_);
  AccumulateMoments(queries, stride, num_rows, hd, nullptr, query_moments_.data() + idx * hd * hd);
  query_counts_[idx] += num_rows;
}

absl::StatusOr<KeyBasis> KeyCovarianceAccumulator::Finish(std::span<const float> inv_freq, std::string source) const {
  KVS_RETURN_IF_ERROR(CheckEqualCounts(counts_, "key"));
  KVS_RETURN_IF_ERROR(CheckEqualCounts(query_counts_, "query"));
  const int64_t n = counts_.front();
  const int64_t nq = query_counts_.front();
  KeyBasis b;
  b.num_layers = num_layers_;
  b.num_kv_heads = num_kv_heads_;
  b.head_dim = head_dim_;
  b.num_tokens = n;
  b.source = std::move(source);
  b.inv_freq.assign(inv_freq.begin(), inv_freq.end());
  const size_t hd = static_cast<size_t>(head_dim_);
  const size_t heads = counts_.size();
  b.means.resize(heads * hd);
  b.variances.resize(heads * hd);
  b.axes.resize(heads * hd * hd);
  b.query_moments.resize(heads * hd * hd);
  const double inv_nq = 1.0 / static_cast<double>(nq);
  const double inv_n = 1.0 / static_cast<double>(n);
  std::vector<double> cov(hd * hd);
  for (size_t h = 0; h < heads; ++h) {
    const double* s = sums_.data() + h * hd;
    const double* m = moments_.data() + h * hd * hd;
    double* mu = b.means.data() + h * hd;
    for (size_t d = 0; d < hd; ++d) mu[d] = s[d] * inv_n;
    for (size_t i = 0; i < hd; ++i) {
      for (size_t j = i; j < hd; ++j) {
        cov[i * hd + j] = cov[j * hd + i] = m[i * hd + j] * inv_n - mu[i] * mu[j];
      }
    }
    KVS_ASSIGN_OR_RETURN(kernels::cpu::SymmetricEigen e, kernels::cpu::EigenSymmetric(cov, head_dim_));
    // Rounding can leave the smallest eigenvalues of a rank-deficient covariance slightly
    // negative; a variance is >= 0.
    for (size_t i = 0; i < hd; ++i) b.variances[h * hd + i] = std::max(0.0, e.values[i]);
    std::copy(e.vectors.begin(), e.vectors.end(), b.axes.begin() + static_cast<std::ptrdiff_t>(h * hd * hd));
    const double* qs = query_moments_.data() + h * hd * hd;
    double* qm = b.query_moments.data() + h * hd * hd;
    for (size_t i = 0; i < hd; ++i) {
      for (size_t j = i; j < hd; ++j) qm[i * hd + j] = qm[j * hd + i] = qs[i * hd + j] * inv_nq;
    }
  }
  KVS_RETURN_IF_ERROR(ValidateKeyBasis(b));
  return b;
}

}  // namespace kvserve::compression
