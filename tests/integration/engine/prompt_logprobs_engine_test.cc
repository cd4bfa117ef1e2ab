// Prompt logprobs through the whole engine on the random-weight CPU fixture: the logprobs a
// chunked prefill reports for prompt tokens equal the ones obtained by scoring each token on
// its own (the prefix as a prompt, the token forced with allowed_token_ids: the reported
// logprob is the raw row's), also when the prompt is already in the prefix cache; requests
// without prompt_logprobs get none.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine_factory.h"
#include "tests/integration/engine/engine_test_util.h"

namespace kvserve::engine {
namespace {

constexpr int kVocab = 256;

struct Scored {
  std::vector<TokenLogprobs> prompt;
  std::vector<int32_t> tokens;
};

Scored CollectScored(TokenStream& stream) {
  Scored out;
  int events_with_prompt = 0;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    if (!e->prompt_logprobs.empty()) {
      ++events_with_prompt;
      out.prompt = e->prompt_logprobs;
    }
    out.tokens.insert(out.tokens.end(), e->token_ids.begin(), e->token_ids.end());
  }
  EXPECT_LE(events_with_prompt, 1) << "prompt logprobs come once";
  return out;
}

std::unique_ptr<ServingEngine> MakeEngine(CountingObserver* obs) {
  config::Config cfg;
  cfg.engine.threads = 1;
  cfg.cache.kv_bytes = 16ull << 20;
  cfg.cache.block_size = 16;
  cfg.scheduler.max_num_batched_tokens = 24;  // a 45-token prompt prefills in chunks
  EngineDeps deps;
  deps.observer = obs;
  auto e = CreateEngine(cfg, std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32",
                        std::move(deps));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(PromptLogprobsEngine, ChunkedPrefillMatchesScoringEachTokenAlone) {
  CountingObserver obs;
  auto engine = MakeEngine(&obs);
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = Prompt(45, 7, kVocab);

  // The prompt enters the prefix cache first: scoring must not reuse it.
  auto warm = engine->Submit(Greedy("warm", prompt, 2));
  ASSERT_TRUE(warm.ok()) << warm.status();
  const Scored plain = CollectScored(**warm);
  EXPECT_TRUE(plain.prompt.empty()) << "no prompt logprobs unless asked";

  RequestSpec spec = Greedy("scored", prompt, 2);
  spec.sampling.prompt_logprobs = 3;
  auto scored_stream = engine->Submit(spec);
  ASSERT_TRUE(scored_stream.ok()) << scored_stream.status();
  const Scored scored = CollectScored(**scored_stream);
  EXPECT_EQ(scored.tokens, plain.tokens) << "scoring does not change the output";
  ASSERT_EQ(scored.prompt.size(), prompt.size() - 1)
      << "one entry per prompt token after the first";

  for (size_t k = 1; k < prompt.size(); ++k) {
    const TokenLogprobs& e = scored.prompt[k - 1];
    EXPECT_EQ(e.token_id, prompt[k]) << "position " << k;
    ASSERT_EQ(e.top.size(), 3u) << "position " << k;
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
    EXPECT_GE(e.top[1].logprob, e.top[2].logprob);
    EXPECT_GE(e.top[0].logprob, e.logprob) << "position " << k;
    EXPECT_GE(e.rank, 1);
    if (e.rank == 1) {
      EXPECT_NEAR(e.top[0].logprob, e.logprob, 1e-6);
    }
    if (e.rank > 3) {
      EXPECT_LT(e.logprob, e.top[2].logprob);
    }

    // The same token scored alone: prefix k as the prompt, that token forced.
    RequestSpec alone =
        Greedy("alone" + std::to_string(k),
               std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(k)), 1);
    alone.sampling.logprobs = 1;
    alone.sampling.allowed_token_ids = {prompt[k]};
    auto s = engine->Submit(alone);
    ASSERT_TRUE(s.ok()) << s.status();
    float want = 0.0f;
    int32_t got_token = -1;
    while (!(*s)->done()) {
      auto ev = (*s)->pop_wait(std::chrono::milliseconds(200));
      if (!ev || ev->logprobs.empty()) continue;
      want = ev->logprobs[0].logprob;
      got_token = ev->logprobs[0].token_id;
    }
    ASSERT_EQ(got_token, prompt[k]);
    EXPECT_NEAR(e.logprob, want, 2e-4) << "position " << k;
  }
  ExpectNoBlocksLeaked(engine, obs, "prompt logprobs");
}

TEST(PromptLogprobsEngine, OutOfRangeIsRefusedNamingTheField) {
  auto engine = MakeEngine(nullptr);
  ASSERT_NE(engine, nullptr);
  RequestSpec spec = Greedy("bad", Prompt(8, 1, kVocab), 1);
  spec.sampling.prompt_logprobs = 21;
  auto s = engine->Submit(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("prompt_logprobs"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace kvserve::engine
