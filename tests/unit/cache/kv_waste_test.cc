// KV memory waste of the paged layout: token slots allocated but not holding a token.
// With paging the only waste is the unfilled tail of each sequence's last block, about
// (block_size / 2) / mean_length; the PagedAttention paper reports under 4% for vLLM.
//
// Workload: 1,000 sequences with ShareGPT-like lengths (prompt uniform in [1, 320], output
// uniform in [1, 676]: means ~160 and ~338 tokens), block size 16. Every sequence
// allocates its prompt, then all decode in lock step, one token per step; waste is sampled
// after every step (time average) and at the end.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "cache/cache_invariants.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

TEST(KvWaste, PagedLayoutWastesUnderFourPercent) {
  constexpr int kSeqs = 1000;
  constexpr int kBs = 16;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> prompt_len(1, 320), output_len(1, 676);
  std::vector<int> target(kSeqs), len(kSeqs);
  int64_t total_tokens = 0;
  for (int i = 0; i < kSeqs; ++i) {
    len[i] = prompt_len(rng);
    target[i] = len[i] + output_len(rng);
    total_tokens += target[i];
  }
  auto m = testing::MakeManager(static_cast<int32_t>(total_tokens / kBs + kSeqs), kBs);

  auto waste = [&] {
    int64_t tokens = 0;
    for (int i = 0; i < kSeqs; ++i) tokens += m->num_tokens(SeqId{i});
    const int64_t slots = static_cast<int64_t>(m->usage().used_blocks) * kBs;
    return slots == 0 ? 0.0 : static_cast<double>(slots - tokens) / static_cast<double>(slots);
  };

  for (int i = 0; i < kSeqs; ++i) ASSERT_TRUE(m->allocate(SeqId{i}, len[i]).has_value());
  double sum = waste();
  int samples = 1;
  for (bool any = true; any;) {
    any = false;
    for (int i = 0; i < kSeqs; ++i) {
      if (len[i] == target[i]) continue;
      ASSERT_TRUE(m->allocate(SeqId{i}, 1).has_value());
      ++len[i];
      any = true;
    }
    sum += waste();
    ++samples;
  }
  ASSERT_TRUE(CheckCacheInvariants(*m).ok());
  const double final_waste = waste();
  const double mean_waste = sum / samples;
  const double mean_len = static_cast<double>(total_tokens) / kSeqs;
  std::printf("KV waste: final %.2f%%, time-averaged %.2f%% over %d steps "
              "(1000 seqs, mean length %.0f tokens, block %d; (bs/2)/mean = %.2f%%)\n",
              100 * final_waste, 100 * mean_waste, samples, mean_len, kBs,
              100.0 * (kBs / 2.0) / mean_len);
  EXPECT_LT(final_waste, 0.04);
  EXPECT_LT(mean_waste, 0.04);
  // Paging wastes less than one block per sequence, always.
  EXPECT_LT(final_waste * m->usage().used_blocks * kBs, static_cast<double>(kSeqs) * kBs);
}

}  // namespace
}  // namespace kvserve::cache
