// Embeddings through the whole engine on the random-weight CPU fixture: the mean-pooled prompt
// hidden states of a chunked prefill equal the mean of the last-pooled states of every prefix
// (a causal model's row k is the last row of the prompt's first k + 1 tokens), with the prompt
// already in the prefix cache; a plain request gets no embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/engine_factory.h"
#include "tests/integration/engine/engine_test_util.h"

namespace kvserve::engine {
namespace {

constexpr int kVocab = 256;

std::vector<float> Embed(ServingEngine& engine, const std::string& id, std::vector<int32_t> prompt,
                         scheduler::Pooling pooling) {
  RequestSpec spec = Greedy(id, std::move(prompt), 1);
  spec.sampling.embed = pooling;
  auto s = engine.Submit(spec);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  std::vector<float> out;
  while (!(*s)->done()) {
    auto e = (*s)->pop_wait(std::chrono::milliseconds(200));
    if (e && !e->embedding.empty()) out = e->embedding;
  }
  return out;
}

TEST(EmbeddingEngine, MeanOfChunkedPrefillIsTheMeanOfEveryPrefixLastRow) {
  config::Config cfg;
  cfg.engine.threads = 1;
  cfg.cache.kv_bytes = 16ull << 20;
  cfg.cache.block_size = 16;
  cfg.scheduler.max_num_batched_tokens = 24;  // a 40-token prompt prefills in chunks
  CountingObserver obs;
  EngineDeps deps;
  deps.observer = &obs;
  auto made = CreateEngine(cfg, std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32",
                           std::move(deps));
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<ServingEngine> engine = std::move(*made);
  const std::vector<int32_t> prompt = Prompt(40, 3, kVocab);

  auto plain = engine->Submit(Greedy("plain", prompt, 2));  // fills the prefix cache
  ASSERT_TRUE(plain.ok());
  while (!(*plain)->done()) {
    auto e = (*plain)->pop_wait(std::chrono::milliseconds(200));
    if (e) EXPECT_TRUE(e->embedding.empty());
  }
  const std::vector<float> mean = Embed(*engine, "mean", prompt, scheduler::Pooling::kMean);
  ASSERT_FALSE(mean.empty());
  std::vector<float> want(mean.size(), 0.0f);
  for (size_t k = 1; k <= prompt.size(); ++k) {
    const std::vector<float> last =
        Embed(*engine, "last" + std::to_string(k),
              std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(k)),
              scheduler::Pooling::kLast);
    ASSERT_EQ(last.size(), mean.size()) << k;
    for (size_t i = 0; i < want.size(); ++i) want[i] += last[i] / static_cast<float>(prompt.size());
  }
  double norm = 0.0;
  for (size_t i = 0; i < mean.size(); ++i) {
    EXPECT_NEAR(mean[i], want[i], 1e-4) << i;
    norm += static_cast<double>(mean[i]) * mean[i];
  }
  EXPECT_GT(norm, 0.0);
  ExpectNoBlocksLeaked(engine, obs, "embeddings");
}

}  // namespace
}  // namespace kvserve::engine
