// The host prefix tier through the whole engine on a real model: a prompt whose blocks were
// evicted from the KV pool to the host tier is served from there, with output identical to a
// cold run and the loaded tokens reported as cached_prompt_tokens and as host-tier hits.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include "engine/engine_factory.h"
#include "model/model_config.h"

namespace kvserve::engine {
namespace {

class TierObserver : public EngineObserver {
 public:
  void OnKvTiers(const KvTierStats& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = t;
  }
  void OnStep(const StepStats& s) override {
    used_blocks = s.blocks_total - s.blocks_free;
    host_used = s.host_blocks_used;
  }
  KvTierStats last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  std::atomic<int64_t> used_blocks{-1};
  std::atomic<int64_t> host_used{-1};

 private:
  std::mutex mu_;
  KvTierStats last_;
};

std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(3 + (i * 37 + salt * 101) % 250);
  return p;
}

struct Outcome {
  std::vector<int32_t> tokens;
  int64_t cached = -1;
  bool failed = false;
};

Outcome Serve(ServingEngine& e, const std::string& id, std::vector<int32_t> prompt) {
  RequestSpec s;
  s.request_id = id;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = 12;
  s.ignore_eos = true;
  s.sampling.temperature = 0.0f;
  Outcome o;
  auto st = e.Submit(std::move(s));
  if (!st.ok()) {
    o.failed = true;
    return o;
  }
  TokenStream& stream = **st;
  while (!stream.done()) {
    auto ev = stream.pop_wait(std::chrono::milliseconds(200));
    if (!ev) continue;
    o.tokens.insert(o.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    if (ev->finish && *ev->finish != FinishReason::kLength && *ev->finish != FinishReason::kStop) o.failed = true;
    if (ev->usage) o.cached = ev->usage->cached_prompt_tokens;
  }
  return o;
}

TEST(KvTierEngine, HostTierHitMatchesAColdRunAndCountsAsCached) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32";
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors")) << dir;
  auto mc = model::LoadModelConfig(dir);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const uint64_t bytes_per_block =
      static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * 16 * mc->head_dim * sizeof(float);

  config::Config cfg;
  cfg.engine.threads = 1;
  cfg.cache.block_size = 16;
  cfg.cache.kv_bytes = 16 * bytes_per_block;      // 16 blocks: one long prompt at a time
  cfg.cache.host_swap_bytes = 0;
  const std::vector<int32_t> shared = Prompt(161, 7);  // 10 full blocks may hit

  // Cold reference without a host tier.
  Outcome cold;
  {
    auto e = CreateEngine(cfg, dir, EngineDeps{});
    ASSERT_TRUE(e.ok()) << e.status();
    cold = Serve(**e, "cold", shared);
  }
  ASSERT_FALSE(cold.failed);
  ASSERT_EQ(cold.tokens.size(), 12u);
  EXPECT_EQ(cold.cached, 0);

  cfg.cache.host_cache_bytes = 32 * bytes_per_block;
  TierObserver obs;
  EngineDeps deps;
  deps.observer = &obs;
  auto e = CreateEngine(cfg, dir, std::move(deps));
  ASSERT_TRUE(e.ok()) << e.status();
  const Outcome first = Serve(**e, "first", shared);
  EXPECT_EQ(first.tokens, cold.tokens);
  EXPECT_EQ(first.cached, 0);
  // Two other long prompts push the shared prompt's blocks out of the pool to the host tier.
  EXPECT_FALSE(Serve(**e, "other1", Prompt(200, 1)).failed);
  EXPECT_FALSE(Serve(**e, "other2", Prompt(200, 2)).failed);
  const KvTierStats before = obs.last();
  EXPECT_GE(before.written_bytes[KvTierStats::kHost], 10 * bytes_per_block);
  EXPECT_GT(before.host_blocks, 0);

  const Outcome hit = Serve(**e, "hit", shared);
  EXPECT_EQ(hit.tokens, cold.tokens) << "a host-tier hit must give the cold run's output";
  EXPECT_EQ(hit.cached, 160);
  const KvTierStats after = obs.last();
  EXPECT_EQ(after.hit_blocks[KvTierStats::kHost] - before.hit_blocks[KvTierStats::kHost], 10u);
  EXPECT_EQ(after.read_bytes[KvTierStats::kHost] - before.read_bytes[KvTierStats::kHost], 10 * bytes_per_block);

  // And once more: now the blocks are back on the device (a device hit).
  const Outcome again = Serve(**e, "again", shared);
  EXPECT_EQ(again.tokens, cold.tokens);
  EXPECT_EQ(again.cached, 160);
  EXPECT_EQ(obs.last().hit_blocks[KvTierStats::kHost], after.hit_blocks[KvTierStats::kHost]);
  e->reset();
  EXPECT_EQ(obs.used_blocks.load(), 0) << "KV blocks leaked";
}

}  // namespace
}  // namespace kvserve::engine
