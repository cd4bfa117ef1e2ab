// Sliding-window models through the whole engine (issue 27): a Mistral-style model whose
// every layer attends a 32-token window runs to 4x its window holding at most the window
// plus one block of KV per sequence (released blocks go back to the pool), its greedy
// tokens equal the float64 reference's, preemption (swap falls back to recompute for a
// sequence with released blocks) leaves them unchanged and leaks nothing, and a
// compressing policy is refused with a reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine_factory.h"
#include "model/model_config.h"
#include "tests/integration/engine/engine_test_util.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/hf_models/hf_test_util.h"

namespace kvserve::engine {
namespace {

constexpr int kWindow = 32;
constexpr int kBlock = 8;

class SlidingWindowEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        testing::hf::WriteRandomCheckpoint(testing::hf::MistralPreset(kWindow), dir_.path()).ok());
    auto mc = model::LoadModelConfig(dir_.path());
    ASSERT_TRUE(mc.ok()) << mc.status();
    ASSERT_EQ(mc->kv_window(), kWindow);
    bytes_per_block_ =
        static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * kBlock * mc->head_dim * 4;
  }

  std::unique_ptr<ServingEngine> Make(config::Config cfg, EngineObserver* obs) {
    cfg.engine.threads = 1;
    cfg.cache.block_size = kBlock;
    EngineDeps deps;
    deps.observer = obs;
    deps.spec_row_cost = speculative::kDefaultRowCost;  // drafts must not depend on timing
    auto e = CreateEngine(cfg, dir_.path(), std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  testing::hf::FixtureDir dir_{"mistral_window32"};
  uint64_t bytes_per_block_ = 0;
};

TEST_F(SlidingWindowEngine, KvStaysWithinTheWindowAndTokensMatchTheReference) {
  const std::vector<int32_t> prompt = Prompt(8, 0, 256);
  const int generate = 4 * kWindow - 8;  // a context of 4x the window
  auto want = testing::hf::Greedy(dir_.path(), prompt, generate);
  ASSERT_TRUE(want.ok()) << want.status();

  config::Config cfg;
  cfg.cache.kv_bytes = 64 * bytes_per_block_;
  CountingObserver obs;
  auto engine = Make(cfg, &obs);
  ASSERT_NE(engine, nullptr);
  auto s = engine->Submit(Greedy("alone", prompt, generate));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Collect(**s), *want);
  // After every step: blocks of the window (32 tokens = 4 blocks) plus the partial one.
  EXPECT_LE(obs.peak_used_blocks.load(), kWindow / kBlock + 1);
  ExpectNoBlocksLeaked(engine, obs, "alone");
}

TEST_F(SlidingWindowEngine, PreemptionKeepsTokensAndLeaksNothing) {
  const int generate = 3 * kWindow;
  std::vector<std::vector<int32_t>> prompts, alone;
  for (int i = 0; i < 4; ++i) prompts.push_back(Prompt(6 + 3 * i, i + 1, 256));
  {
    config::Config cfg;
    cfg.cache.kv_bytes = 64 * bytes_per_block_;
    CountingObserver obs;
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = engine->Submit(Greedy("a" + std::to_string(i), prompts[i], generate));
      ASSERT_TRUE(s.ok()) << s.status();
      alone.push_back(Collect(**s));
    }
    ExpectNoBlocksLeaked(engine, obs, "alone");
  }
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    config::Config cfg;
    cfg.scheduler.preemption_mode = mode;
    // A request then holds at most window + 16 rows + a block (Engine::ResolvePolicy).
    cfg.scheduler.max_num_batched_tokens = 16;
    // Four sequences need up to 4 x 5 blocks together; 11 hold two of them at a time.
    cfg.cache.kv_bytes = 12 * bytes_per_block_;
    cfg.cache.host_swap_bytes = 64 * bytes_per_block_;
    CountingObserver obs;
    obs.Hold();
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = engine->Submit(Greedy("p" + std::to_string(i), prompts[i], generate));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    obs.Release();
    for (size_t i = 0; i < streams.size(); ++i)
      EXPECT_EQ(Collect(*streams[i]), alone[i]) << "request " << i;
    EXPECT_GT(obs.preemptions.load(), 0) << "the pool was meant to force preemption";
    ExpectNoBlocksLeaked(engine, obs, mode == config::PreemptionMode::kSwap ? "swap" : "recompute");
  }
}

TEST_F(SlidingWindowEngine, CompressingPoliciesAreRefusedAndAutoRunsFull) {
  config::Config cfg;
  cfg.cache.kv_bytes = 64 * bytes_per_block_;
  CountingObserver obs;
  auto engine = Make(cfg, &obs);
  ASSERT_NE(engine, nullptr);
  RequestSpec spec = Greedy("h2o", Prompt(8, 3, 256), 4);
  spec.compression.policy = config::CompressionPolicyKind::kH2O;
  spec.compression.budget = 8;
  auto refused = engine->Submit(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("sliding window"), std::string::npos)
      << refused.status();
  spec.compression.policy = config::CompressionPolicyKind::kAuto;
  auto full = engine->Submit(spec);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(Collect(**full).size(), 4u);
}

// A hybrid model with layer groups (Gemma 3: 5 window layers of 8 tokens to 1 global): greedy
// tokens past 8x the window equal the float64 reference's, each sequence's window tables stay
// within the window, preemption (swap falls back to recompute: window tables are never
// swapped) keeps the tokens, n > 1 forks the window tables, speculative drafts roll them back,
// a prefix hit starts with the window before it, and nothing leaks.
TEST(HybridLayerGroupsEngine, TokensMatchTheReferenceThroughPreemptionAndForks) {
  testing::hf::FixtureDir dir("gemma3_groups");
  ASSERT_TRUE(testing::hf::WriteRandomCheckpoint(testing::hf::Gemma3Preset(), dir.path()).ok());
  auto mc = model::LoadModelConfig(dir.path());
  ASSERT_TRUE(mc.ok()) << mc.status();
  // One slot array per block (1 global layer): a block is one layer's KV of kBlock tokens.
  const uint64_t block_bytes = 2ull * mc->num_kv_heads * kBlock * mc->head_dim * 4;
  auto make = [&](config::Config cfg, EngineObserver* obs) -> std::unique_ptr<ServingEngine> {
    cfg.engine.threads = 1;
    cfg.cache.block_size = kBlock;
    cfg.scheduler.max_num_batched_tokens = 16;
    EngineDeps deps;
    deps.observer = obs;
    deps.spec_row_cost = speculative::kDefaultRowCost;  // drafts must not depend on timing
    auto e = CreateEngine(cfg, dir.path(), std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  };
  const int generate = 64;  // 8x the window
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(Prompt(6 + 3 * i, i + 1, mc->vocab_size));
  auto want = testing::hf::Greedy(dir.path(), prompts[0], generate);
  ASSERT_TRUE(want.ok()) << want.status();
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    config::Config cfg;
    cfg.scheduler.preemption_mode = mode;
    cfg.speculative.min_acceptance = 0.0;  // a request asking for drafts drafts every step
    // Near its end a sequence holds 10 main blocks + 5 window tables x 2-3 blocks: 40 blocks
    // hold one, not two.
    cfg.cache.kv_bytes = 40 * block_bytes;
    CountingObserver obs;
    obs.Hold();
    auto engine = make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = engine->Submit(Greedy("p" + std::to_string(i), prompts[i], generate));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    obs.Release();
    std::vector<std::vector<int32_t>> got;
    for (auto& s : streams) got.push_back(Collect(*s));
    EXPECT_EQ(got[0], *want);
    EXPECT_GT(obs.preemptions.load(), 0) << "the pool was meant to force preemption";
    if (mode == config::PreemptionMode::kSwap) {
      ExpectNoBlocksLeaked(engine, obs, "swap");
      continue;
    }
    // N-gram speculation drafting every step: rejected guesses leave the window tables too
    // (KvCacheManager::rollback), and greedy output is unchanged.
    {
      RequestSpec r = Greedy("spec", prompts[0], generate);
      r.speculative.method = config::SpeculativeMethod::kNgram;
      r.speculative.num_tokens = 4;
      r.speculative.ngram_min = 1;
      auto s = engine->Submit(r);
      ASSERT_TRUE(s.ok()) << s.status();
      RequestUsage usage;
      EXPECT_EQ(Collect(**s, nullptr, &usage), *want);
      EXPECT_GT(usage.spec_draft_tokens, 0);
      EXPECT_LT(usage.spec_accepted_tokens, usage.spec_draft_tokens)
          << "no guess was ever rejected";
    }
    // Prefix caching: a prompt of 4.5x the window computed, then hit. The hit's window tables
    // hold the window before it (KvCacheManager::match_windows) and the tokens go on as the
    // reference's.
    {
      std::vector<int32_t> long_prompt = prompts[0];
      long_prompt.insert(long_prompt.end(), want->begin(), want->begin() + 30);
      const std::vector<int32_t> rest(want->begin() + 30, want->begin() + 46);
      for (int round = 0; round < 2; ++round) {
        auto s = engine->Submit(Greedy("long" + std::to_string(round), long_prompt, 16));
        ASSERT_TRUE(s.ok()) << s.status();
        RequestUsage usage;
        EXPECT_EQ(Collect(**s, nullptr, &usage), rest) << "round " << round;
        // Every full block but the one holding the last prompt token.
        if (round == 1) EXPECT_EQ(usage.cached_prompt_tokens, (36 - 1) / kBlock * kBlock);
      }
    }
    // Alone, each prompt gives the same tokens as under preemption; n = 2 greedy samples fork
    // the tables (copy-on-write of the window tails) and both equal it.
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestSpec r = Greedy("n2-" + std::to_string(i), prompts[i], generate);
      r.n = 2;
      auto s = engine->Submit(r);
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<int32_t> per_sample[2];
      while (!(*s)->done()) {
        auto e = (*s)->pop_wait(std::chrono::milliseconds(200));
        if (!e) continue;
        ASSERT_TRUE(e->sample_index == 0 || e->sample_index == 1);
        auto& out = per_sample[e->sample_index];
        out.insert(out.end(), e->token_ids.begin(), e->token_ids.end());
      }
      EXPECT_EQ(per_sample[0], got[i]) << "request " << i;
      EXPECT_EQ(per_sample[1], got[i]) << "request " << i;
    }
    ExpectNoBlocksLeaked(engine, obs, "recompute, then n = 2");
  }
}

}  // namespace
}  // namespace kvserve::engine
