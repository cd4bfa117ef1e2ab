#include "cuda/sampler_draws.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace kvserve::cuda {

int LaunchUniformDraws(const DrawRow* host_rows, int num_rows, int draws, double* host_out);

absl::Status DeviceUniformDraws(std::span<const DrawRow> rows, int draws, std::span<double> out) {
  if (draws < 1) return absl::InvalidArgumentError("draws: must be at least 1");
  if (out.size() != rows.size() * static_cast<size_t>(draws)) {
    return absl::InvalidArgumentError(absl::StrCat("out: has ", out.size(), " entries, need ", rows.size() * draws));
  }
  if (rows.empty()) return absl::OkStatus();
  const int err = LaunchUniformDraws(rows.data(), static_cast<int>(rows.size()), draws, out.data());
  if (err != 0) {
    const auto e = static_cast<cudaError_t>(err);
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("device uniform draws: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::cuda
