// The sampler's uniform draws computed on the device: u = TokenRng(seed, k, sample).Uniform()
// for a batch of rows, with the same header (model/sampler_rng.h) the CPU sampler uses, so
// the GPU sampler draws exactly the CPU's tokens. Plain C++ header.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace kvserve::cuda {

struct DrawRow {
  uint64_t seed = 0;         // the request's seed
  int64_t token_index = 0;   // k: tokens this sequence generated before
  int32_t sample_index = 0;  // n > 1 sample
};

// `draws` = how many consecutive Uniform() values per row (the sampler uses one; more tests
// the generator's stream). out: [rows.size()][draws]. Synchronous; device 0.
absl::Status DeviceUniformDraws(std::span<const DrawRow> rows, int draws, std::span<double> out);

}  // namespace kvserve::cuda
