// Speculative decoding in the scheduler, driven by the FakeModelRunner (which verifies drafts
// greedily and checks every KV slot of every sequence each step) with the cache invariant
// checker after every step. A 3-token vocabulary makes n-gram guesses right often enough to
// exercise acceptance, partial acceptance and rejection in the same run.
#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/scheduler_harness.h"

namespace kvserve::scheduler {
namespace {

using testing::Harness;
using testing::HarnessOptions;

constexpr int kVocab = 3;

HarnessOptions Options(int budget, int32_t blocks, bool speculation) {
  HarnessOptions o;
  o.sched.max_num_batched_tokens = budget;
  o.sched.max_num_seqs = 8;
  o.sched.max_model_len = 4096;
  o.sched.speculation = speculation;
  o.num_blocks = blocks;
  o.block_size = 4;
  o.vocab_size = kVocab;
  return o;
}

speculative::SpecParams Ngram(int k) {
  speculative::SpecParams p;
  p.method = config::SpeculativeMethod::kNgram;
  p.num_tokens = k;
  p.ngram_min = 1;
  p.ngram_max = 3;
  p.min_acceptance = 0.0;  // never switch off: every decode step drafts
  return p;
}

struct BatchRun {
  std::vector<std::vector<int32_t>> outputs;
  SchedulerCounters counters;
};

// Four requests (different prompts, seeds, lengths) through one harness.
BatchRun RunBatch(HarnessOptions o, bool spec, int num_host_blocks = 0, bool prefix = false) {
  o.num_host_blocks = num_host_blocks;
  o.prefix_caching = prefix;
  Harness h(o);
  if (spec) h.spec = Ngram(4);
  std::vector<cache::SeqId> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(h.Add(10 + 3 * i, 30 + 7 * i, 0, 0, 11 + i, 1, prefix ? 0 : i));
  h.RunUntilIdle();
  BatchRun r;
  for (cache::SeqId id : ids) r.outputs.push_back(h.output(id));
  r.counters = h.sched().counters();
  h.ExpectAllFree();
  return r;
}

TEST(SchedulerSpeculation, NgramDraftsLeaveTheOutputUnchangedAndFreeRejectedSlots) {
  const BatchRun plain = RunBatch(Options(64, 256, false), false);
  const BatchRun spec = RunBatch(Options(64, 256, true), true);
  EXPECT_EQ(spec.outputs, plain.outputs);
  for (size_t i = 0; i < plain.outputs.size(); ++i)
    EXPECT_EQ(plain.outputs[i].size(), 30u + 7 * i);  // max_tokens exactly
  EXPECT_EQ(plain.counters.spec_drafts, 0u);
  EXPECT_GT(spec.counters.spec_drafts, 10u);
  EXPECT_GT(spec.counters.spec_accepted_tokens, 0u) << "no guess was ever accepted";
  EXPECT_LT(spec.counters.spec_accepted_tokens, spec.counters.spec_draft_tokens)
      << "no guess was ever rejected";
  ASSERT_FALSE(spec.counters.spec_accepted_per_position.empty());
  EXPECT_EQ(spec.counters.spec_accepted_per_position[0] >=
                spec.counters.spec_accepted_per_position.back(),
            true);
  // Fewer steps' worth of decode rows were needed: accepted guesses are tokens for free.
  EXPECT_GT(spec.counters.spec_accepted_tokens, spec.counters.spec_drafts / 4);
}

TEST(SchedulerSpeculation, DraftsNeverPreemptAndStayExactUnderPreemption) {
  const BatchRun plain = RunBatch(Options(64, 256, false), false);
  // 24 usable blocks of 4 slots: four sequences of 40..70 tokens cannot all stay resident.
  for (int host : {0, 64}) {
    HarnessOptions o = Options(64, 25, true);
    o.sched.preemption_mode =
        host > 0 ? config::PreemptionMode::kSwap : config::PreemptionMode::kRecompute;
    const BatchRun spec = RunBatch(o, true, host);
    EXPECT_EQ(spec.outputs, plain.outputs) << "host blocks " << host;
    EXPECT_GT(spec.counters.preemptions_recompute + spec.counters.preemptions_swap, 0u)
        << "meant to preempt";
    EXPECT_GT(spec.counters.spec_drafts, 0u);
  }
}

TEST(SchedulerSpeculation, PrefixCachingPublishesOnlyVerifiedTokens) {
  // Same prompt for all four (prefix hits); the fake runner checks every slot a hit maps.
  const BatchRun plain = RunBatch(Options(64, 256, false), false, 0, true);
  const BatchRun spec = RunBatch(Options(64, 256, true), true, 0, true);
  EXPECT_EQ(spec.outputs, plain.outputs);
  EXPECT_GT(spec.counters.spec_drafts, 0u);
}

TEST(SchedulerSpeculation, DraftRowsCountInTheTokenBudget) {
  Harness h(Options(3, 256, true));  // budget 3: one decode row and at most 2 guesses
  h.spec = Ngram(8);
  cache::SeqId s = h.Add(12, 40, 0, 0, 5);
  bool drafted = false;
  while (h.Step()) {
    const StepPlan& p = h.last_plan();
    EXPECT_LE(p.total_tokens, 3);
    for (const auto& q : p.seqs) {
      EXPECT_LE(q.num_draft, 2);
      drafted |= q.num_draft > 0;
    }
  }
  EXPECT_TRUE(drafted);
  EXPECT_EQ(h.output(s).size(), 40u);
  h.ExpectAllFree();
}

TEST(SchedulerSpeculation, LowAcceptanceSwitchesDraftingOffForAWhile) {
  // 50 tokens: a single-token suffix almost always recurs (the proposer has a guess), and
  // the guess is right about once in 50.
  auto drafts = [](double min_acceptance) {
    HarnessOptions o = Options(64, 256, true);
    o.vocab_size = 50;
    Harness h(o);
    h.spec = Ngram(4);
    h.spec.min_acceptance = min_acceptance;
    cache::SeqId s = h.Add(20, 200, 0, 0, 3);
    h.RunUntilIdle();
    EXPECT_EQ(h.output(s).size(), 200u);
    h.ExpectAllFree();
    return h.sched().counters().spec_drafts;
  };
  const uint64_t always = drafts(0.0);
  const uint64_t gated = drafts(0.5);
  EXPECT_GT(always, 120u);
  EXPECT_GT(gated, 0u);
  EXPECT_LT(gated, always / 4);
}

// The adaptive draft length (speculative/draft_length.h) in the scheduler: the same sequences
// draft fewer guesses per draft in a batch of 8 than alone, sizing off (row cost 0) drafts the
// most, and the outputs stay max_tokens long.
TEST(SchedulerSpeculation, DraftsShortenAsTheBatchGrows) {
  auto guesses_per_draft = [](int batch, double row_cost) {
    Harness h(Options(512, 1024, true));
    h.spec = Ngram(8);
    h.spec.row_cost = row_cost;
    std::vector<cache::SeqId> ids;
    for (int i = 0; i < batch; ++i) ids.push_back(h.Add(12, 60, 0, 0, 5 + i));
    h.RunUntilIdle();
    for (cache::SeqId id : ids) EXPECT_EQ(h.output(id).size(), 60u);
    h.ExpectAllFree();
    const SchedulerCounters& c = h.sched().counters();
    EXPECT_GT(c.spec_drafts, 0u);
    return static_cast<double>(c.spec_draft_tokens) /
           static_cast<double>(std::max<uint64_t>(c.spec_drafts, 1));
  };
  const double alone = guesses_per_draft(1, 0.1);
  const double batch8 = guesses_per_draft(8, 0.1);
  const double unsized = guesses_per_draft(8, 0.0);
  EXPECT_LT(batch8, alone);
  EXPECT_LT(batch8, unsized);
  EXPECT_GT(unsized, 6.0);  // 8 guesses but where max_tokens cuts a draft short
}

}  // namespace
}  // namespace kvserve::scheduler
