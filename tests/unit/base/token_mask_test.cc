#include "base/token_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvserve::base {
namespace {

// The per-token definition MaskLogits must agree with.
void Reference(const std::vector<uint64_t>& mask, std::vector<float>& row) {
  for (size_t i = 0; i < row.size(); ++i) {
    const size_t w = i / 64;
    if (w >= mask.size() || !((mask[w] >> (i % 64)) & 1)) row[i] = -std::numeric_limits<float>::infinity();
  }
}

TEST(TokenMask, AgreesWithThePerTokenDefinition) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> logit(-20.0f, 20.0f);
  for (size_t vocab : {1u, 63u, 64u, 65u, 200u, 4096u, 32003u}) {
    for (int trial = 0; trial < 20; ++trial) {
      // Words all set, all clear, sparse and dense; sometimes a mask shorter than the row.
      const size_t words = (vocab + 63) / 64 - (trial % 5 == 4 && vocab > 64 ? 1 : 0);
      std::vector<uint64_t> mask(words);
      for (auto& w : mask) {
        switch (rng() % 4) {
          case 0: w = 0; break;
          case 1: w = ~uint64_t{0}; break;
          case 2: w = rng() & rng() & rng(); break;
          default: w = rng(); break;
        }
      }
      std::vector<float> row(vocab);
      for (float& l : row) l = logit(rng);
      std::vector<float> want = row;
      Reference(mask, want);
      MaskLogits(mask, row);
      for (size_t i = 0; i < vocab; ++i) {
        ASSERT_EQ(row[i], want[i]) << "vocab " << vocab << " trial " << trial << " token " << i;
      }
    }
  }
}

TEST(TokenMask, KeepsAllowedValuesExactlyIncludingExtremes) {
  std::vector<float> row = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0.0f, -0.0f,
                            std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::infinity()};
  row.resize(64, 1.0f);
  const std::vector<float> before = row;
  MaskLogits(std::vector<uint64_t>{0x3Full}, row);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(std::signbit(row[i]), std::signbit(before[i])) << i;
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(row[i], before[i]) << i;
  for (size_t i = 6; i < 64; ++i) EXPECT_TRUE(std::isinf(row[i]) && row[i] < 0) << i;
}

}  // namespace
}  // namespace kvserve::base
