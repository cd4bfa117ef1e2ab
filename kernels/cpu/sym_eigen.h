// Eigen-decomposition of a small dense symmetric matrix (a PCA covariance), through the
// LAPACK that OpenBLAS already ships and the CPU kernels already link (dsyev): no
// hand-written solver. LAPACK's Fortran interface stays inside sym_eigen.cc.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::kernels::cpu {

struct SymmetricEigen {
  // Descending: values[0] is the largest.
  std::vector<double> values;
  // vectors[i * n + d]: element d of the unit eigenvector of values[i] (one vector per row).
  std::vector<double> vectors;
};

// `a`: n x n, symmetric (only the upper triangle is read), row-major. InvalidArgument for a
// wrong size or non-finite entries; Internal when LAPACK does not converge.
absl::StatusOr<SymmetricEigen> EigenSymmetric(const std::vector<double>& a, int n);

}  // namespace kvserve::kernels::cpu
