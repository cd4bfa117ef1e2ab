// The device draws the same uniforms as the host for the same (seed, token, sample): the GPU
// sampler then picks the CPU sampler's tokens. Needs a GPU (label gpu).
#include "cuda/sampler_draws.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/device_probe.h"
#include "model/sampler_rng.h"

namespace kvserve::cuda {
namespace {

TEST(DeviceUniformDraws, EqualTheHostDrawsBitForBit) {
  const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  std::vector<DrawRow> rows;
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
    for (int64_t k : {0, 1, 7, 1000, 123456789}) {
      for (int32_t s : {0, 1, 5}) rows.push_back({seed, k, s});
    }
  }
  constexpr int kDraws = 4;
  std::vector<double> device(rows.size() * kDraws);
  ASSERT_TRUE(DeviceUniformDraws(rows, kDraws, device).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    model::SamplerRng rng = model::TokenRng(rows[i].seed, rows[i].token_index, rows[i].sample_index);
    for (int d = 0; d < kDraws; ++d) EXPECT_EQ(device[i * kDraws + d], rng.Uniform()) << i << " draw " << d;
  }
}

}  // namespace
}  // namespace kvserve::cuda
