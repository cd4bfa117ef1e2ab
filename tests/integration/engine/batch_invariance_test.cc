// Batch invariance on a real model through the whole engine: a greedy request produces
// the same tokens alone, among 31 other requests, with chunked prefill on or off, and
// after being preempted and resumed. Runs on the random-weight fixture model, the bundled
// kvs-tiny model, and random Mixtral / Qwen3-MoE checkpoints written at test time
// (tests/support/hf_models): expert routing must not depend on the batch either.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "engine/engine_factory.h"
#include "model/model_config.h"
#include "tests/integration/engine/engine_test_util.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"

namespace kvserve::engine {
namespace {

class BatchInvariance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // "hf:<preset>": a random Hugging Face checkpoint written for this test.
    if (GetParam().rfind("hf:", 0) == 0) {
      const std::string preset = GetParam().substr(3);
      dir_ =
          ::testing::TempDir() + "/batch_invariance_" + std::to_string(::getpid()) + "_" + preset;
      const auto spec = preset == "mixtral" ? kvserve::testing::hf::MixtralPreset()
                                            : kvserve::testing::hf::Qwen3MoePreset();
      ASSERT_TRUE(kvserve::testing::hf::WriteRandomCheckpoint(spec, dir_).ok());
      written_ = true;
    } else {
      dir_ = std::string(KVSERVE_SOURCE_DIR) + "/" + GetParam();
    }
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/model.safetensors")) << "model not present: " << dir_;
  }

  std::unique_ptr<ServingEngine> Make(config::Config cfg, EngineObserver* obs = nullptr) {
    cfg.engine.threads = 1;  // ctest runs tests in parallel; OpenMP teams would oversubscribe
    EngineDeps deps;
    deps.observer = obs;
    auto e = CreateEngine(cfg, dir_, std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  void TearDown() override {
    if (written_) std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  bool written_ = false;
};

TEST_P(BatchInvariance, GreedyOutputDoesNotDependOnTheBatch) {
  config::Config base;
  base.cache.kv_bytes = 64ull << 20;
  // Reference: alone, chunked prefill on with a generous budget.
  CountingObserver alone_obs;
  auto alone_engine = Make(base, &alone_obs);
  ASSERT_NE(alone_engine, nullptr);
  const int vocab = 256;  // token ids used below stay inside every test model's vocabulary
  RequestSpec probe = Greedy("probe", Prompt(70, 0, vocab), 24);
  auto s = alone_engine->Submit(probe);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int32_t> alone = Collect(**s);
  ASSERT_EQ(alone.size(), 24u);
  ExpectNoBlocksLeaked(alone_engine, alone_obs, "alone");

  // With 31 other requests in flight.
  {
    CountingObserver obs;
    obs.Hold();
    auto engine = Make(base, &obs);
    std::vector<std::shared_ptr<TokenStream>> others;
    for (int i = 0; i < 31; ++i) {
      RequestSpec o = Greedy("o" + std::to_string(i), Prompt(10 + (i * 7) % 60, i + 1, vocab), 20 + i % 9);
      o.sampling.temperature = (i % 2) ? 0.8f : 0.0f;
      o.sampling.seed = 1000 + i;
      auto st = engine->Submit(o);
      ASSERT_TRUE(st.ok());
      others.push_back(*st);
    }
    auto ps = engine->Submit(probe);
    obs.Release();
    ASSERT_TRUE(ps.ok());
    EXPECT_EQ(Collect(**ps), alone) << "in a batch of 32";
    for (auto& o : others) Collect(*o);
    EXPECT_GE(obs.max_batch.load(), 16);
    ExpectNoBlocksLeaked(engine, obs, "batch of 32");
  }
  // Chunked prefill off (the whole prompt in one step) and on with a tiny budget.
  for (bool chunked : {false, true}) {
    config::Config cfg = base;
    cfg.scheduler.enable_chunked_prefill = chunked;
    cfg.scheduler.max_num_batched_tokens = chunked ? 16 : 2048;
    CountingObserver obs;
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    auto ps = engine->Submit(probe);
    ASSERT_TRUE(ps.ok());
    EXPECT_EQ(Collect(**ps), alone) << "chunked=" << chunked;
    ExpectNoBlocksLeaked(engine, obs, chunked ? "chunked prefill" : "whole-prompt prefill");
  }
  // Preempted and resumed (recompute and swap): a pool of 12 blocks of 16 tokens holds
  // two of these requests at a time, not seven.
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const uint64_t bytes_per_block =
      static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * 16 * mc->head_dim * sizeof(float);
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    config::Config cfg = base;
    cfg.scheduler.preemption_mode = mode;
    cfg.cache.block_size = 16;
    cfg.cache.kv_bytes = 12 * bytes_per_block;
    cfg.cache.host_swap_bytes = 64 * bytes_per_block;
    CountingObserver obs;
    obs.Hold();
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    auto ps = engine->Submit(probe);
    ASSERT_TRUE(ps.ok()) << ps.status();
    for (int i = 0; i < 6; ++i) {
      auto st = engine->Submit(Greedy("p" + std::to_string(i), Prompt(60, i + 7, vocab), 24));
      ASSERT_TRUE(st.ok());
      streams.push_back(*st);
    }
    obs.Release();
    EXPECT_EQ(Collect(**ps), alone) << "preemption mode " << static_cast<int>(mode);
    for (auto& st : streams) Collect(*st);
    EXPECT_GT(obs.preemptions.load(), 0) << "the pool was meant to force preemption";
    ExpectNoBlocksLeaked(engine, obs, mode == config::PreemptionMode::kSwap ? "swap" : "recompute");
  }
}

std::string ParamName(size_t index) {
  static const char* const kNames[] = {"random_llama", "kvs_tiny", "mixtral", "qwen3_moe"};
  return kNames[index];
}

INSTANTIATE_TEST_SUITE_P(Models, BatchInvariance,
                         ::testing::Values("tests/fixtures/model/llama_f32", "models/kvs-tiny",
                                           "hf:mixtral", "hf:qwen3_moe"),
                         [](const auto& p) { return ParamName(p.index); });

}  // namespace
}  // namespace kvserve::engine
