#include "kernels/cpu/sym_eigen.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

// LAPACK's double-precision symmetric eigen-solver (OpenBLAS exports it; Debian ships no
// LAPACKE header with it). The two trailing lengths are the hidden Fortran string lengths.
extern "C" void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                       double* work, const int* lwork, int* info, size_t jobz_len, size_t uplo_len);

namespace kvserve::kernels::cpu {

absl::StatusOr<SymmetricEigen> EigenSymmetric(const std::vector<double>& a, int n) {
  if (n < 1 || a.size() != static_cast<size_t>(n) * static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("eigen: a ", n, " x ", n, " matrix needs ", n * n, " entries, got ",
                                                   a.size()));
  }
  for (double x : a) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError("eigen: non-finite matrix entry");
  }
  // Row-major upper triangle == column-major lower triangle: pass uplo 'L'.
  std::vector<double> m = a;
  std::vector<double> w(static_cast<size_t>(n));
  const char jobz = 'V', uplo = 'L';
  int info = 0, lwork = -1;
  double query = 0.0;
  dsyev_(&jobz, &uplo, &n, m.data(), &n, w.data(), &query, &lwork, &info, 1, 1);
  if (info != 0) return absl::InternalError(absl::StrCat("eigen: dsyev workspace query failed (info ", info, ")"));
  lwork = static_cast<int>(query);
  std::vector<double> work(static_cast<size_t>(lwork));
  dsyev_(&jobz, &uplo, &n, m.data(), &n, w.data(), work.data(), &lwork, &info, 1, 1);
  if (info != 0) return absl::InternalError(absl::StrCat("eigen: dsyev did not converge (info ", info, ")"));
  // dsyev: ascending values; column i of the column-major result (= row i of m as stored) is
  // the eigenvector of w[i]. Reverse to descending.
  SymmetricEigen e;
  e.values.resize(static_cast<size_t>(n));
  e.vectors.resize(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    const int src = n - 1 - i;
    e.values[static_cast<size_t>(i)] = w[static_cast<size_t>(src)];
    for (int d = 0; d < n; ++d) {
      e.vectors[static_cast<size_t>(i) * n + d] = m[static_cast<size_t>(src) * n + d];
    }
  }
  return e;
}

}  // namespace kvserve::kernels::cpu
