#include "scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/scheduler/scheduler_harness.h"

namespace kvserve::scheduler {
namespace {

using testing::Harness;
using testing::HarnessOptions;

HarnessOptions Small(int budget, int32_t blocks, int max_seqs = 8) {
  HarnessOptions o;
  o.sched.max_num_batched_tokens = budget;
  o.sched.max_num_seqs = max_seqs;
  o.sched.max_model_len = 4096;
  o.num_blocks = blocks;
  o.block_size = 4;
  return o;
}

// Reference: a sequence's tokens when it runs alone with plenty of room.
std::vector<int32_t> RunAlone(int prompt_len, int max_tokens, uint64_t seed, int prompt_salt = 0) {
  Harness h(Small(64, 256));
  cache::SeqId s = h.Add(prompt_len, max_tokens, 0, 0, seed, 1, prompt_salt);
  h.RunUntilIdle();
  return h.output(s);
}

TEST(Scheduler, ChunkedPrefillSplitsLongPromptsAcrossSteps) {
  Harness h(Small(/*budget=*/8, /*blocks=*/32));
  cache::SeqId s = h.Add(/*prompt_len=*/20, /*max_tokens=*/3);
  h.RunUntilIdle();
  // 8 + 8 + 4 prompt tokens, the last chunk samples; then two decode steps.
  EXPECT_EQ(h.output(s).size(), 3u);
  EXPECT_EQ(h.finished()[s.value()], SeqFinish::kLength);
  EXPECT_EQ(h.output(s), RunAlone(20, 3, 1));
  h.ExpectGolden("chunked_prefill");
  h.ExpectAllFree();
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForAWholeBudget) {
  HarnessOptions o = Small(8, 32);
  o.sched.enable_chunked_prefill = false;
  Harness h(o);
  cache::SeqId a = h.Add(6, 2);
  cache::SeqId b = h.Add(6, 2);
  h.Step();
  // a takes 6 of 8 tokens; b's 6 do not fit in the remaining 2 and must not be split.
  ASSERT_EQ(h.last_plan().seqs.size(), 1u);
  EXPECT_EQ(h.last_plan().seqs[0].seq, a);
  h.RunUntilIdle();
  EXPECT_EQ(h.output(b).size(), 2u);
  h.ExpectAllFree();
}

TEST(Scheduler, PreemptionWithRecomputeResumesExactly) {
  // 7 usable blocks of 4 tokens = 28 slots. Two sequences of 8 + 12 tokens need 10 blocks:
  // the newer one is preempted, freed, and recomputed later.
  Harness h(Small(16, /*blocks=*/8));
  cache::SeqId a = h.Add(8, 12, 0, 0, /*seed=*/5, 1, 1);
  cache::SeqId b = h.Add(8, 12, 0, 0, /*seed=*/6, 1, 2);
  h.RunUntilIdle();
  EXPECT_GE(h.sched().counters().preemptions_recompute, 1u);
  EXPECT_EQ(h.output(a), RunAlone(8, 12, 5, 1));
  EXPECT_EQ(h.output(b), RunAlone(8, 12, 6, 2));
  h.ExpectGolden("preempt_recompute");
  h.ExpectAllFree();
}

TEST(Scheduler, PreemptionWithSwapMovesBlocksToHostAndBack) {
  HarnessOptions o = Small(16, 8);
  o.sched.preemption_mode = config::PreemptionMode::kSwap;
  o.num_host_blocks = 16;
  Harness h(o);
  cache::SeqId a = h.Add(8, 12, 0, 0, 5, 1, 1);
  cache::SeqId b = h.Add(8, 12, 0, 0, 6, 1, 2);
  h.RunUntilIdle();
  EXPECT_GE(h.sched().counters().preemptions_swap, 1u);
  EXPECT_EQ(h.sched().counters().preemptions_recompute, 0u);
  EXPECT_GT(h.cache().usage().swapped_in_blocks, 0u);
  // The fake runner checked at every step that swapped-in slots hold the right tokens.
  EXPECT_EQ(h.output(a), RunAlone(8, 12, 5, 1));
  EXPECT_EQ(h.output(b), RunAlone(8, 12, 6, 2));
  h.ExpectGolden("preempt_swap");
  h.ExpectAllFree();
}

TEST(Scheduler, SwapFallsBackToRecomputeWhenHostTierIsFull) {
  HarnessOptions o = Small(16, 8);
  o.sched.preemption_mode = config::PreemptionMode::kSwap;
  o.num_host_blocks = 1;  // too small for any victim
  Harness h(o);
  cache::SeqId a = h.Add(8, 12, 0, 0, 5, 1, 1);
  cache::SeqId b = h.Add(8, 12, 0, 0, 6, 1, 2);
  h.RunUntilIdle();
  EXPECT_EQ(h.sched().counters().preemptions_swap, 0u);
  EXPECT_GE(h.sched().counters().preemptions_recompute, 1u);
  EXPECT_EQ(h.output(a), RunAlone(8, 12, 5, 1));
  EXPECT_EQ(h.output(b), RunAlone(8, 12, 6, 2));
  h.ExpectAllFree();
}

TEST(Scheduler, AbortMidPrefillAndMidDecodeFreesBlocksNextStep) {
  Harness h(Small(8, 32));
  cache::SeqId a = h.Add(20, 10);  // long prompt: still prefilling after one step
  cache::SeqId b = h.Add(2, 10);
  h.Step();
  h.Step();
  h.Step();  // a finished its prefill (8+8+4) at step 3; b was admitted in between
  ASSERT_FALSE(h.output(b).empty());
  h.sched().Abort(b);  // mid-decode
  cache::SeqId c = h.Add(24, 10);
  h.Step();            // c starts its prefill
  h.sched().Abort(c);  // mid-prefill
  EXPECT_EQ(h.cache().num_sequences(), 1);  // only a holds blocks now
  h.RunUntilIdle();
  EXPECT_EQ(h.output(a).size(), 10u);
  h.ExpectGolden("abort");
  h.ExpectAllFree();
  EXPECT_EQ(h.runner().known_sequences(), 0u);  // the runner was told to forget all three
}

TEST(Scheduler, AbortIsIdempotentAndIgnoresUnknownIds) {
  Harness h(Small(8, 32));
  cache::SeqId a = h.Add(4, 4);
  h.sched().Abort(a);
  h.sched().Abort(a);
  h.sched().Abort(cache::SeqId{999});
  h.RunUntilIdle();
  h.ExpectAllFree();
}

TEST(Scheduler, PriorityPolicyAdmitsLowerValuesFirst) {
  HarnessOptions o = Small(64, 64, /*max_seqs=*/1);
  o.sched.queue_policy = config::QueuePolicy::kPriority;
  Harness h(o);
  cache::SeqId low = h.Add(4, 2, 0, /*priority=*/5);
  cache::SeqId high = h.Add(4, 2, 0, /*priority=*/-1);
  cache::SeqId mid = h.Add(4, 2, 0, /*priority=*/0);
  std::vector<int64_t> order;
  while (h.Step()) {
    for (const auto& q : h.last_plan().seqs) {
      if (q.table_reset) order.push_back(q.seq.value());
    }
  }
  EXPECT_THAT(order, ::testing::ElementsAre(high.value(), mid.value(), low.value()));
  h.ExpectGolden("priority");
  h.ExpectAllFree();
}

TEST(Scheduler, FcfsPolicyIgnoresPriority) {
  HarnessOptions o = Small(64, 64, 1);
  Harness h(o);
  cache::SeqId first = h.Add(4, 2, 0, 5);
  cache::SeqId second = h.Add(4, 2, 0, -1);
  std::vector<int64_t> order;
  while (h.Step()) {
    for (const auto& q : h.last_plan().seqs) {
      if (q.table_reset) order.push_back(q.seq.value());
    }
  }
  EXPECT_THAT(order, ::testing::ElementsAre(first.value(), second.value()));
}

TEST(Scheduler, PreemptionPicksTheLowestPriorityVictim) {
  HarnessOptions o = Small(32, 8);
  o.sched.queue_policy = config::QueuePolicy::kPriority;
  Harness h(o);
  cache::SeqId urgent = h.Add(8, 12, 0, /*priority=*/0, 5, 1, 1);
  cache::SeqId background = h.Add(8, 12, 0, /*priority=*/9, 6, 1, 2);
  h.RunUntilIdle();
  const SequenceState* none = h.sched().find(urgent);
  EXPECT_EQ(none, nullptr);
  // The urgent one never lost its blocks: it finished first, untouched by preemption.
  EXPECT_EQ(h.output(urgent), RunAlone(8, 12, 5, 1));
  EXPECT_EQ(h.output(background), RunAlone(8, 12, 6, 2));
  EXPECT_GE(h.sched().counters().preemptions_recompute, 1u);
}

TEST(Scheduler, TwoTenantsShareTokensByWeightUnderOverload) {
  HarnessOptions o = Small(/*budget=*/32, /*blocks=*/4096, /*max_seqs=*/64);
  o.sched.tenants = {TenantLimits{3.0, 0}, TenantLimits{1.0, 0}};
  Harness h(o);
  // Both tenants flood the queue with more work than the run can finish.
  for (int i = 0; i < 200; ++i) {
    h.Add(24, 40, /*tenant=*/0, 0, 1 + i, 1, i);
    h.Add(24, 40, /*tenant=*/1, 0, 1000 + i, 1, 500 + i);
  }
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(h.Step());
  const auto& tokens = h.sched().counters().tenant_tokens;
  double share = static_cast<double>(tokens[0]) / static_cast<double>(tokens[1]);
  std::printf("tenant tokens: weight 3 -> %llu, weight 1 -> %llu, ratio %.3f (target 3)\n",
              static_cast<unsigned long long>(tokens[0]), static_cast<unsigned long long>(tokens[1]), share);
  EXPECT_NEAR(share, 3.0, 0.3);
}

TEST(Scheduler, IdleTenantDoesNotBankCredit) {
  HarnessOptions o = Small(16, 4096, 64);
  o.sched.tenants = {TenantLimits{1.0, 0}, TenantLimits{1.0, 0}};
  Harness h(o);
  for (int i = 0; i < 200; ++i) h.Add(16, 20, 0, 0, 1 + i, 1, i);
  for (int i = 0; i < 100; ++i) h.Step();  // tenant 0 alone for a while, still backlogged
  uint64_t before0 = h.sched().counters().tenant_tokens[0];
  for (int i = 0; i < 40; ++i) h.Add(16, 20, 1, 0, 100 + i, 1, 100 + i);
  for (int i = 0; i < 100; ++i) h.Step();
  uint64_t got0 = h.sched().counters().tenant_tokens[0] - before0;
  uint64_t got1 = h.sched().counters().tenant_tokens[1];
  // Equal weights: after tenant 1 arrives the two split the budget, rather than tenant 1
  // taking everything until it "catches up" on the time it was idle.
  EXPECT_NEAR(static_cast<double>(got0) / static_cast<double>(got1), 1.0, 0.2)
      << got0 << " vs " << got1;
}

TEST(Scheduler, TenantMaxRunningCapsAdmission) {
  HarnessOptions o = Small(64, 256, 16);
  o.sched.tenants = {TenantLimits{1.0, /*max_running=*/2}};
  Harness h(o);
  for (int i = 0; i < 5; ++i) h.Add(4, 8, 0, 0, i + 1, 1, i);
  h.Step();
  EXPECT_EQ(h.sched().num_running(), 2);
  EXPECT_EQ(h.sched().num_waiting(), 3);
  h.RunUntilIdle();
  h.ExpectAllFree();
}

TEST(Scheduler, ParallelSamplesShareThePromptBlocks) {
  Harness h(Small(64, 64));
  cache::SeqId first = h.Add(/*prompt_len=*/10, /*max_tokens=*/6, 0, 0, /*seed=*/3, /*n=*/3);
  // Step 1: sample 0 computes 9 of 10 prompt tokens (stops one short for the fork).
  h.Step();
  ASSERT_EQ(h.last_plan().seqs.size(), 1u);
  EXPECT_EQ(h.last_plan().seqs[0].num_tokens, 9);
  // Step 2: the children fork; all three feed the last prompt token. Blocks 0-1 (8 tokens)
  // are shared; the partial third block is copied on write for two of the three.
  h.Step();
  EXPECT_EQ(h.last_plan().seqs.size(), 3u);
  EXPECT_EQ(h.last_plan().copies.size(), 2u);
  h.RunUntilIdle();
  std::set<std::vector<int32_t>> distinct;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(h.output(cache::SeqId{first.value() + k}).size(), 6u);
    distinct.insert(h.output(cache::SeqId{first.value() + k}));
  }
  EXPECT_EQ(distinct.size(), 3u);  // different sample indices, different tokens
  h.ExpectGolden("parallel_samples");
  h.ExpectAllFree();
}

// With max_num_seqs == 1 the parent holds the only seat, so its children can never fork;
// they compute their prompts themselves instead of stalling the parent forever.
TEST(Scheduler, ParallelSamplesWithOneSeatRunOneAfterAnother) {
  Harness h(Small(64, 64, /*max_seqs=*/1));
  cache::SeqId first = h.Add(/*prompt_len=*/10, /*max_tokens=*/5, 0, 0, /*seed=*/3, /*n=*/3);
  EXPECT_LT(h.RunUntilIdle(200), 200);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(h.output(cache::SeqId{first.value() + k}).size(), 5u) << k;
  EXPECT_EQ(h.output(first), RunAlone(10, 5, 3));
  h.ExpectAllFree();
}

TEST(Scheduler, PrefixCacheHitSkipsComputedBlocks) {
  HarnessOptions o = Small(64, 64);
  o.prefix_caching = true;
  Harness h(o);
  h.Add(17, 2, 0, 0, 1, 1, /*prompt_salt=*/0);
  h.RunUntilIdle();
  cache::SeqId second = h.Add(17, 2, 0, 0, 1, 1, /*prompt_salt=*/0);
  h.Step();
  // 16 of 17 prompt tokens (4 full blocks) come from the cache; only the last is fed.
  ASSERT_EQ(h.last_plan().seqs.size(), 1u);
  EXPECT_EQ(h.last_plan().seqs[0].first_position, 16);
  EXPECT_EQ(h.last_plan().seqs[0].num_tokens, 1);
  h.RunUntilIdle();
  EXPECT_EQ(h.output(second), RunAlone(17, 2, 1));
  h.ExpectAllFree();
}

TEST(Scheduler, StopTokenAndMaxModelLenEndSequences) {
  HarnessOptions o = Small(64, 64);
  o.sched.max_model_len = 12;
  Harness h(o);
  cache::SeqId a = h.Add(10, 100);
  h.RunUntilIdle();
  EXPECT_EQ(h.output(a).size(), 2u);  // 10 prompt + 2 generated = max_model_len
  EXPECT_EQ(h.finished()[a.value()], SeqFinish::kMaxModelLen);

  std::vector<int32_t> alone = RunAlone(6, 20, 9);
  HarnessOptions o2 = Small(64, 64);
  o2.sched.eos_token_ids = {alone[4]};
  Harness h2(o2);
  cache::SeqId b = h2.Add(6, 20, 0, 0, 9);
  h2.RunUntilIdle();
  // Stops at the first occurrence of the EOS id (which may come before index 4).
  auto first = std::find(alone.begin(), alone.end(), alone[4]);
  EXPECT_EQ(h2.output(b), std::vector<int32_t>(alone.begin(), first + 1));
  EXPECT_EQ(h2.finished()[b.value()], SeqFinish::kEos);
}

TEST(Scheduler, ManySequencesUnderMemoryPressureAllFinishCorrectly) {
  HarnessOptions o = Small(48, 40, 32);
  o.sched.tenants = {TenantLimits{2.0, 0}, TenantLimits{1.0, 0}};
  Harness h(o);
  std::vector<std::tuple<cache::SeqId, int, int, uint64_t, int>> reqs;
  for (int i = 0; i < 60; ++i) {
    int plen = 3 + (i * 5) % 17, gen = 1 + (i * 3) % 13;
    reqs.emplace_back(h.Add(plen, gen, i % 2, 0, 50 + i, 1, i), plen, gen, 50 + i, i);
  }
  h.RunUntilIdle();
  for (auto& [id, plen, gen, seed, salt] : reqs) {
    EXPECT_EQ(h.output(id), RunAlone(plen, gen, seed, salt)) << "seq " << id.value();
  }
  h.ExpectAllFree();
}

// Swap preemption with n = 2 requests in small pools: forks, swap-outs of parents and
// children, swap-ins (possibly in steps that compute nothing) all keep every sequence exact,
// and nothing leaks. The harness executes every plan that moves KV (StepPlan::moves_kv), as
// the engine does.
TEST(Scheduler, SwapPreemptionWithParallelSamplesStaysExact) {
  int swap_in_only_plans = 0, swap_outs = 0;
  for (int32_t blocks : {6, 7, 8, 9, 10, 11, 12, 14, 16}) {
    for (int budget : {4, 8, 16, 64}) {
      for (int max_seqs : {2, 3, 4, 6}) {
        HarnessOptions o = Small(budget, blocks, max_seqs);
        o.sched.preemption_mode = config::PreemptionMode::kSwap;
        o.num_host_blocks = 32;
        Harness h(o);
        std::vector<std::tuple<cache::SeqId, int, int, uint64_t, int, int>> reqs;
        for (int i = 0; i < 6; ++i) {
          const int plen = 5 + (i * 3) % 7, gen = 4 + (i * 5) % 9, n = (i % 3 == 0) ? 2 : 1;
          reqs.emplace_back(h.Add(plen, gen, 0, 0, 70 + i, n, i), plen, gen, 70 + i, i, n);
        }
        for (int step = 0; step < 2000 && h.Step(); ++step) {
          const StepPlan& p = h.last_plan();
          if (p.seqs.empty() && !p.swap_in.empty()) ++swap_in_only_plans;
          if (!p.swap_out.empty()) ++swap_outs;
        }
        for (auto& [id, plen, gen, seed, salt, n] : reqs) {
          // Sample 0 of an n = 2 request draws like a lone request with the same seed.
          EXPECT_EQ(h.output(id), RunAlone(plen, gen, seed, salt))
              << "seq " << id.value() << " blocks=" << blocks << " budget=" << budget << " max_seqs=" << max_seqs;
          if (n == 2) EXPECT_EQ(h.output(cache::SeqId{id.value() + 1}).size(), static_cast<size_t>(gen));
        }
        h.ExpectAllFree();
      }
    }
  }
  EXPECT_GT(swap_outs, 0) << "the grid no longer preempts by swapping";
  // With today's admission a sequence is swapped in only when another one finished or runs,
  // so no plan swaps in alone (the engine would still execute one: see StepPlanMovesKv).
  EXPECT_EQ(swap_in_only_plans, 0);
}

// What the engine and the harness use to decide whether a step must reach the runner.
TEST(Scheduler, MaxLorasHoldsBackTheAdapterTooManyAndLetsOthersPass) {
  HarnessOptions o = Small(64, 128);
  o.sched.max_loras = 1;
  Harness h(o);
  h.lora_id = 0;
  cache::SeqId a = h.Add(6, 5, 0, 0, 1, 1, 1);
  h.lora_id = 1;
  cache::SeqId b = h.Add(6, 5, 0, 0, 2, 1, 2);  // a second adapter: waits for a's to finish
  h.lora_id = -1;
  cache::SeqId c = h.Add(6, 5, 0, 0, 3, 1, 3);  // the base: never held back
  h.lora_id = 0;
  cache::SeqId d = h.Add(6, 5, 0, 0, 4, 1, 4);  // a's adapter: runs with it
  ASSERT_TRUE(h.Step());
  std::vector<cache::SeqId> first;
  for (const ScheduledSeq& q : h.last_plan().seqs) first.push_back(q.seq);
  EXPECT_THAT(first, ::testing::UnorderedElementsAre(a, c, d));
  bool b_ran = false;
  while (h.Step()) {
    std::set<int32_t> adapters;
    for (const ScheduledSeq& q : h.last_plan().seqs) {
      if (q.lora_id >= 0) adapters.insert(q.lora_id);
      b_ran |= q.seq == b;
      if (q.seq == b) {
        EXPECT_EQ(q.lora_id, 1);
      }
    }
    EXPECT_LE(adapters.size(), 1u) << "a step packed more adapters than max_loras";
  }
  EXPECT_TRUE(b_ran);
  EXPECT_EQ(h.output(b), RunAlone(6, 5, 2, 2));
  EXPECT_EQ(h.output(c), RunAlone(6, 5, 3, 3));
  h.ExpectAllFree();
}

TEST(StepPlanMovesKv, AnyCopyMakesAPlanNonEmpty) {
  StepPlan p;
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(p.moves_kv());
  p.swap_in.push_back({cache::BlockId{0}, cache::BlockId{3}});
  EXPECT_TRUE(p.moves_kv());
  EXPECT_FALSE(p.empty());  // a swap-in alone is work: the blocks are counted as resident
  p.clear();
  p.copies.push_back({cache::BlockId{1}, cache::BlockId{2}});
  EXPECT_FALSE(p.empty());
  p.clear();
  p.swap_out.push_back({cache::BlockId{1}, cache::BlockId{2}});
  EXPECT_FALSE(p.empty());
  p.clear();
  EXPECT_TRUE(p.empty());
}

// ---- KV compression: the scheduler's side (the fake runner plays the policy).

// streamingllm keeps sinks (or the pinned prompt) + recent slots = budget.
compression::PolicyParams Streaming(int64_t budget, int64_t slack, bool protect = true) {
  compression::PolicyParams p;
  p.kind = config::CompressionPolicyKind::kStreamingLlm;
  p.sinks = 2;
  p.budget = budget;
  p.divide_length = slack;
  p.protect_prompt = protect;
  return p;
}

TEST(Scheduler, CompressingSequencesTruncateAndStayBounded) {
  HarnessOptions o = Small(64, 64);  // block size 4
  Harness h(o);
  h.compression = Streaming(/*budget=*/6 + 8, /*slack=*/4);  // the prompt + 8 recent
  h.max_chunk = 4;
  cache::SeqId a = h.Add(/*prompt_len=*/6, /*max_tokens=*/40);
  h.compression = Streaming(/*budget=*/18 + 8, /*slack=*/4);
  cache::SeqId b = h.Add(/*prompt_len=*/18, /*max_tokens=*/30, 0, 0, /*seed=*/7);
  h.compression = {};
  cache::SeqId c = h.Add(6, 20, 0, 0, 9);  // uncompressed neighbour
  int64_t max_a = 0, max_b = 0;
  while (h.Step()) {
    // Bound: target (prompt + window) + slack + one chunk.
    max_a = std::max(max_a, h.cache().num_tokens(a));
    max_b = std::max(max_b, h.cache().num_tokens(b));
  }
  EXPECT_LE(max_a, 6 + 8 + 4 + 4);
  EXPECT_LE(max_b, 18 + 8 + 4 + 4);
  // The fake runner's tokens depend only on the history, so compression changes nothing
  // in what the sequences produce; the runner checked every kept slot at every step.
  EXPECT_EQ(h.output(a), RunAlone(6, 40, 1));
  EXPECT_EQ(h.output(b), RunAlone(18, 30, 7));
  EXPECT_EQ(h.output(c), RunAlone(6, 20, 9));
  // Prefill of b ran in chunks of at most 4 tokens although the budget allowed more.
  EXPECT_THAT(h.trace(), ::testing::HasSubstr("streamingllm target=14"));
  EXPECT_THAT(h.trace(), ::testing::HasSubstr("compact seq 1: 18->14 slots"));
  h.ExpectGolden("compression");
  h.ExpectAllFree();
}

TEST(Scheduler, CompressingSequencesShareOnlyTheirProtectedPrefix) {
  for (bool protect : {true, false}) {
    HarnessOptions o = Small(64, 64);
    o.prefix_caching = true;
    Harness h(o);
    h.compression = Streaming(protect ? 17 + 8 : 2 + 8, 4, protect);  // prefix + 8 recent
    h.max_chunk = 32;
    h.Add(17, 12);
    h.RunUntilIdle();
    cache::SeqId second = h.Add(17, 12);
    h.Step();
    ASSERT_EQ(h.last_plan().seqs.size(), 1u);
    // Protected: the 4 full prompt blocks are hits. Unprotected: slot 0 on may be moved by
    // a round, so nothing may be shared, and nothing past the first evictable slot was
    // published by the first request either.
    EXPECT_EQ(h.last_plan().seqs[0].first_position, protect ? 16 : 0) << "protect=" << protect;
    h.RunUntilIdle();
    EXPECT_EQ(h.output(second), RunAlone(17, 12, 1));
    h.ExpectAllFree();
  }
}

TEST(Scheduler, SwappedCompressingSequenceKeepsItsCompactedLayout) {
  HarnessOptions o = Small(/*budget=*/64, /*blocks=*/14);
  o.num_host_blocks = 64;
  o.sched.preemption_mode = config::PreemptionMode::kSwap;
  Harness h(o);
  h.compression = Streaming(6 + 8, 4);
  h.max_chunk = 8;
  std::vector<cache::SeqId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(h.Add(6, 40, 0, 0, 20 + i, 1, i));
  h.RunUntilIdle();
  EXPECT_THAT(h.trace(), ::testing::HasSubstr("parked=["));
  EXPECT_THAT(h.trace(), ::testing::HasSubstr("resume)"));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h.output(ids[i]), RunAlone(6, 40, 20 + i, i)) << i;
  h.ExpectAllFree();
}

// Host prefix tier: a prompt whose blocks were evicted from the small pool is served from
// the host tier; the fake runner checks every slot it reads against the token history, so a
// wrong offload or load would fail the step.
TEST(Scheduler, HostPrefixTierServesEvictedPrefixesWithCorrectKv) {
  HarnessOptions o = Small(64, /*blocks=*/17);
  o.prefix_caching = true;
  o.num_host_blocks = 32;
  o.host_cache_blocks = 32;
  Harness h(o);
  cache::SeqId a = h.Add(41, 4, 0, 0, 1, 1, /*prompt_salt=*/1);  // 10 full blocks may hit
  h.RunUntilIdle();
  h.Add(50, 4, 0, 0, 1, 1, 2);  // pushes a's blocks out of the 16-block pool
  h.RunUntilIdle();
  ASSERT_GT(h.cache().usage().offloaded_blocks, 0u);
  cache::SeqId again = h.Add(41, 4, 0, 0, 1, 1, 1);
  h.RunUntilIdle();
  EXPECT_GT(h.cache().usage().host_hit_blocks, 0u);
  EXPECT_EQ(h.output(again), h.output(a));
  EXPECT_EQ(h.output(a), RunAlone(41, 4, 1, 1));
  EXPECT_EQ(h.cache().usage().used_blocks, 0);
  EXPECT_FALSE(h.sched().has_work());
}

// Remote tier: a prompt with full blocks no local tier holds waits for its lookup in its own
// state while a short request runs; it rejoins the queue when the lookup is done.
TEST(Scheduler, RemoteLookupParksTheSequenceWhileOthersRun) {
  HarnessOptions o = Small(64, 64);
  o.prefix_caching = true;
  o.num_host_blocks = 8;
  o.host_cache_blocks = 8;
  Harness h(o);
  h.sched().set_remote_lookups(true);
  cache::SeqId long_seq = h.Add(21, 2, 0, 0, 1, 1, 3);   // 5 full blocks may hit
  cache::SeqId short_seq = h.Add(3, 2, 0, 0, 1, 1, 4);   // no full block: never waits
  ASSERT_TRUE(h.Step());
  ASSERT_EQ(h.last_plan().seqs.size(), 1u);
  EXPECT_EQ(h.last_plan().seqs[0].seq, short_seq);
  std::vector<RemoteLookup> lookups;
  h.sched().take_remote_lookups(lookups);
  ASSERT_EQ(lookups.size(), 1u);
  EXPECT_EQ(lookups[0].seq, long_seq);
  EXPECT_EQ(lookups[0].first_block, 0);
  EXPECT_EQ(lookups[0].hashes.size(), 5u);
  EXPECT_EQ(lookups[0].tenant_salt, cache::TenantSalt(h.sched().find(long_seq)->prefix_key));
  EXPECT_EQ(h.sched().num_waiting_for_remote(), 1);
  EXPECT_EQ(h.sched().num_waiting(), 1);
  h.RunUntilIdle();  // the short request finishes; the long one is not work yet
  EXPECT_EQ(h.output(short_seq).size(), 2u);
  EXPECT_FALSE(h.sched().has_work());
  // Lookup done (a miss): it is admitted and computes, and is never parked again.
  h.sched().remote_lookup_done(long_seq);
  EXPECT_EQ(h.sched().num_waiting_for_remote(), 0);
  h.RunUntilIdle();
  EXPECT_EQ(h.output(long_seq), RunAlone(21, 2, 1, 3));
  lookups.clear();
  h.sched().take_remote_lookups(lookups);
  EXPECT_TRUE(lookups.empty());
  // Aborting a parked sequence releases it.
  cache::SeqId parked = h.Add(30, 2, 0, 0, 1, 1, 5);
  h.Step();
  ASSERT_EQ(h.sched().num_waiting_for_remote(), 1);
  h.sched().Abort(parked);
  EXPECT_EQ(h.sched().num_waiting_for_remote(), 0);
  h.sched().remote_lookup_done(parked);  // late reply: ignored
  EXPECT_FALSE(h.sched().has_work());
}

}  // namespace
}  // namespace kvserve::scheduler
