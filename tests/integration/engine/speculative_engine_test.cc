// Speculative decoding (n-gram) through the whole engine on real CPU models: greedy output
// with drafts equals greedy output without, token for token and logprob for logprob, alone,
// in a batch, on prefix-cache hits and under preemption (recompute and swap), and no KV
// block leaks after rejected drafts. Runs on the random-weight fixture and on kvs-tiny (a
// trained model, whose greedy continuations of a repetitive prompt copy it: high acceptance).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/engine_factory.h"
#include "model/model_config.h"
#include "speculative/draft_model_proposer.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_cache.h"
#include "tests/integration/engine/engine_test_util.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::engine {
namespace {

using Output = TokensAndLogprobs;

// A prompt that repeats a 12-token phrase: copy-heavy, the proposer's best case.
std::vector<int32_t> Repetitive(int len, int salt, int vocab) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(3 + ((i % 12) * 37 + salt * 101) % (vocab - 3));
  return p;
}

class SpeculativeEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(KVSERVE_SOURCE_DIR) + "/" + GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/model.safetensors"))
        << "model not present: " << dir_;
  }
  std::unique_ptr<ServingEngine> Make(config::Config cfg, EngineObserver* obs,
                                      speculative::DraftProposer* draft = nullptr) {
    cfg.engine.threads = 1;
    EngineDeps deps;
    deps.observer = obs;
    deps.draft_proposer = draft;
    // Fixed costs, not timed at start-up: whether a sequence drafts must not depend on the
    // machine the test runs on (a sanitizer build times very differently).
    deps.spec_row_cost = speculative::kDefaultRowCost;
    auto e = CreateEngine(cfg, dir_, std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  static RequestSpec Probe(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
    RequestSpec r = Greedy(id, std::move(prompt), max_tokens);
    r.sampling.logprobs = 1;
    return r;
  }
  std::string dir_;
};

TEST_P(SpeculativeEngine, GreedyOutputEqualsPlainDecoding) {
  constexpr int kVocab = 256;
  config::Config plain_cfg;
  plain_cfg.cache.kv_bytes = 64ull << 20;
  config::Config spec_cfg = plain_cfg;
  spec_cfg.speculative.method = config::SpeculativeMethod::kNgram;
  spec_cfg.speculative.num_tokens = 4;
  spec_cfg.speculative.ngram_min = 1;
  spec_cfg.speculative.min_acceptance = 0.0;  // draft every step: the worst case for exactness
  const std::vector<RequestSpec> probes = {Probe("copy", Repetitive(60, 0, kVocab), 40),
                                           Probe("free", Prompt(50, 3, kVocab), 24)};

  std::vector<Output> want;
  {
    CountingObserver obs;
    auto engine = Make(plain_cfg, &obs);
    ASSERT_NE(engine, nullptr);
    for (const auto& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok()) << s.status();
      want.push_back(CollectWithLogprobs(**s));
      ASSERT_EQ(want.back().tokens.size(), static_cast<size_t>(p.max_tokens));
    }
  }
  // Alone, one after the other: the second "copy" run is a prefix-cache hit.
  {
    SpecObserver obs;
    auto engine = Make(spec_cfg, &obs);
    ASSERT_NE(engine, nullptr);
    int64_t usage_drafted = 0, usage_accepted = 0;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < probes.size(); ++i) {
        RequestSpec p = probes[i];
        p.request_id += std::to_string(round);
        auto s = engine->Submit(p);
        ASSERT_TRUE(s.ok()) << s.status();
        RequestUsage usage;
        EXPECT_EQ(CollectWithLogprobs(**s, &usage), want[i]) << p.request_id;
        EXPECT_LE(usage.spec_accepted_tokens, usage.spec_draft_tokens) << p.request_id;
        EXPECT_LE(usage.spec_accepted_tokens, usage.completion_tokens) << p.request_id;
        usage_drafted += usage.spec_draft_tokens;
        usage_accepted += usage.spec_accepted_tokens;
      }
    }
    EXPECT_GT(obs.drafts.load(), 0);
    EXPECT_GT(obs.accepted.load(), 0) << "the copy-heavy probe accepted nothing";
    EXPECT_LT(obs.accepted.load(), obs.draft_tokens.load()) << "no draft was ever rejected";
    ExpectNoBlocksLeaked(engine, obs, "alone");
    // The requests' usage adds up to what the engine's metrics counted (the engine is gone, so
    // every step was reported).
    EXPECT_EQ(usage_drafted, obs.draft_tokens.load());
    EXPECT_EQ(usage_accepted, obs.accepted.load());
  }
  // In a batch of 8, others sampling at temperature 0.8 with speculation too.
  {
    SpecObserver obs;
    obs.Hold();
    auto engine = Make(spec_cfg, &obs);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> others;
    for (int i = 0; i < 6; ++i) {
      RequestSpec o =
          Greedy("o" + std::to_string(i), Repetitive(20 + 7 * i, i + 1, kVocab), 20 + i);
      o.sampling.temperature = (i % 2) ? 0.8f : 0.0f;
      o.sampling.seed = 100 + i;
      auto st = engine->Submit(o);
      ASSERT_TRUE(st.ok());
      others.push_back(*st);
    }
    std::vector<std::shared_ptr<TokenStream>> mine;
    for (const auto& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok());
      mine.push_back(*s);
    }
    obs.Release();
    for (size_t i = 0; i < probes.size(); ++i)
      EXPECT_EQ(CollectWithLogprobs(*mine[i]), want[i]) << "in a batch";
    for (size_t i = 0; i < others.size(); ++i) EXPECT_EQ(Collect(*others[i]).size(), 20u + i);
    EXPECT_GE(obs.max_batch.load(), 8);
    ExpectNoBlocksLeaked(engine, obs, "batch of 8");
  }
}

TEST_P(SpeculativeEngine, RejectedDraftsLeakNothingUnderPreemption) {
  constexpr int kVocab = 256;
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok()) << mc.status();
  const uint64_t bytes_per_block = static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads *
                                   16 * mc->head_dim * sizeof(float);
  const RequestSpec probe = Probe("probe", Repetitive(60, 0, kVocab), 24);
  Output want;
  {
    config::Config cfg;
    CountingObserver obs;
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(probe);
    ASSERT_TRUE(s.ok());
    want = CollectWithLogprobs(**s);
  }
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    config::Config cfg;
    cfg.speculative.method = config::SpeculativeMethod::kNgram;
    cfg.speculative.ngram_min = 1;
    cfg.speculative.min_acceptance = 0.0;
    cfg.scheduler.preemption_mode = mode;
    cfg.cache.block_size = 16;
    cfg.cache.kv_bytes = 12 * bytes_per_block;  // two of these requests at a time, not seven
    cfg.cache.host_swap_bytes = 64 * bytes_per_block;
    SpecObserver obs;
    obs.Hold();
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    auto ps = engine->Submit(probe);
    ASSERT_TRUE(ps.ok()) << ps.status();
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 6; ++i) {
      auto st = engine->Submit(Greedy("p" + std::to_string(i), Prompt(60, i + 7, kVocab), 24));
      ASSERT_TRUE(st.ok());
      streams.push_back(*st);
    }
    obs.Release();
    EXPECT_EQ(CollectWithLogprobs(**ps), want) << "preemption mode " << static_cast<int>(mode);
    for (auto& st : streams) EXPECT_EQ(Collect(*st).size(), 24u);
    EXPECT_GT(obs.preemptions.load(), 0) << "the pool was meant to force preemption";
    EXPECT_GT(obs.drafts.load(), 0);
    ExpectNoBlocksLeaked(engine, obs, mode == config::PreemptionMode::kSwap ? "swap" : "recompute");
  }
}

// Per sample: tokens, logprobs and finish reason.
struct Samples {
  std::map<int, TokensAndLogprobs> out;
  std::map<int, FinishReason> finish;
  bool operator==(const Samples& o) const = default;
};

Samples CollectSamples(TokenStream& stream) {
  Samples s;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    TokensAndLogprobs& o = s.out[e->sample_index];
    o.tokens.insert(o.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    for (const auto& lp : e->logprobs) o.logprobs.push_back(lp.logprob);
    if (e->finish) s.finish[e->sample_index] = *e->finish;
  }
  return s;
}

// Stop token ids, max_tokens, logprobs and n > 1 with drafts of either method (the draft
// model here is the target itself, so guesses run into the stop token and past max_tokens):
// every sample ends where and how plain decoding's does, with the same tokens and logprobs.
TEST_P(SpeculativeEngine, StopsLengthsAndSamplesAsPlainDecoding) {
  constexpr int kVocab = 256;
  RequestSpec open = Probe("open", Repetitive(50, 4, kVocab), 40);
  config::Config plain_cfg;
  Output reference;
  {
    CountingObserver obs;
    auto engine = Make(plain_cfg, &obs);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(open);
    ASSERT_TRUE(s.ok()) << s.status();
    reference = CollectWithLogprobs(**s);
  }
  ASSERT_EQ(reference.tokens.size(), 40u);
  // The stop token: the greedy output's 13th token (its first occurrence ends the sample).
  RequestSpec stopped = open;
  stopped.request_id = "stopped";
  stopped.ignore_eos = false;
  stopped.stop_token_ids = {reference.tokens[12]};
  stopped.n = 2;
  RequestSpec cut = open;
  cut.request_id = "cut";
  cut.max_tokens = 17;  // ends inside a draft
  cut.n = 3;
  const std::vector<RequestSpec> probes = {stopped, cut};
  std::vector<Samples> want;
  {
    CountingObserver obs;
    auto engine = Make(plain_cfg, &obs);
    ASSERT_NE(engine, nullptr);
    for (const auto& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok()) << s.status();
      want.push_back(CollectSamples(**s));
    }
  }
  ASSERT_EQ(want[0].out.size(), 2u);
  EXPECT_EQ(want[0].finish.at(0), FinishReason::kStop);
  EXPECT_LE(want[0].out.at(0).tokens.size(), 13u);
  EXPECT_EQ(want[1].finish.at(2), FinishReason::kLength);
  for (auto method : {config::SpeculativeMethod::kNgram, config::SpeculativeMethod::kDraft}) {
    config::Config cfg = plain_cfg;
    cfg.speculative.method = method;
    cfg.speculative.num_tokens = 6;
    cfg.speculative.ngram_min = 1;
    cfg.speculative.min_acceptance = 0.0;
    // The target drafting for itself, its guesses charged nothing (guess_cost 0: loaded by
    // CreateEngine it would cost a whole target step, and the adaptive length never drafts).
    std::unique_ptr<speculative::DraftModelProposer> draft;
    base::SteadyClock clock;
    if (method == config::SpeculativeMethod::kDraft) {
      auto mc = model::LoadModelConfig(dir_);
      ASSERT_TRUE(mc.ok());
      speculative::DraftModelOptions o;
      o.kv_bytes = 8ull << 20;
      o.threads = 1;
      o.clock = &clock;
      auto d = speculative::DraftModelProposer::Load(dir_, mc->vocab_size, o, base::Logger());
      ASSERT_TRUE(d.ok()) << d.status();
      draft = std::move(*d);
    }
    const char* name = method == config::SpeculativeMethod::kDraft ? "draft" : "ngram";
    SpecObserver obs;
    obs.Hold();
    auto engine = Make(cfg, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (const auto& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    obs.Release();
    for (size_t i = 0; i < probes.size(); ++i) {
      EXPECT_EQ(CollectSamples(*streams[i]), want[i]) << name << " " << probes[i].request_id;
    }
    EXPECT_GT(obs.accepted.load(), 0) << name;
    ExpectNoBlocksLeaked(engine, obs, name);
    if (draft) EXPECT_EQ(draft->blocks_in_use(), 0);
  }
}

// Structured outputs: guesses are checked under the grammar's mask row by row, so the
// constrained greedy output is the same with and without drafts, n-gram or draft model
// (kvs-tiny and kvs-tiny-draft: they have a tokenizer).
TEST(SpeculativeEngineStructured, GrammarConstrainedGreedyOutputIsUnchanged) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  auto tok = tokenizer::LoadTokenizerDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const tokenizer::Tokenizer& t = **tok;
  std::vector<std::string> bytes(static_cast<size_t>(t.vocab_size()));
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    bytes[static_cast<size_t>(id)] = std::string(t.token_decoder().bytes(id));
    if (t.is_special(id)) excluded.push_back(id);
  }
  if (auto bos = t.bos_id()) excluded.push_back(*bos);
  for (int32_t id : t.eos_ids()) excluded.push_back(id);
  structured::GrammarCache grammars(
      std::make_shared<structured::TokenTrie>(bytes, excluded, t.eos_id().value_or(-1)));
  auto regex = grammars.Get(
      {structured::GrammarSpec::Kind::kRegex, "([a-z]+ ){4,40}[a-z]+\\.", {}, "guided_regex"});
  ASSERT_TRUE(regex.ok()) << regex.status();
  RequestSpec r = Greedy("g", Repetitive(40, 2, 256), 48);
  r.ignore_eos = false;
  r.sampling.grammar = *regex;
  auto run = [&](config::SpeculativeMethod method, SpecObserver& obs) {
    config::Config cfg;
    cfg.engine.threads = 1;
    cfg.speculative.method = method;
    cfg.speculative.ngram_min = 1;
    cfg.speculative.min_acceptance = 0.0;
    if (method == config::SpeculativeMethod::kDraft) {
      cfg.speculative.draft_model = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny-draft";
    }
    EngineDeps deps;
    deps.observer = &obs;
    deps.spec_row_cost = speculative::kDefaultRowCost;  // fixed costs (as Make)
    auto e = CreateEngine(cfg, dir, std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return std::vector<int32_t>{};
    auto s = (*e)->Submit(r);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? Collect(**s) : std::vector<int32_t>{};
  };
  SpecObserver plain_obs, ngram_obs, draft_obs;
  const std::vector<int32_t> plain = run(config::SpeculativeMethod::kNone, plain_obs);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(run(config::SpeculativeMethod::kNgram, ngram_obs), plain) << "ngram";
  EXPECT_GT(ngram_obs.drafts.load(), 0);
  // The draft model guesses without the grammar; the verifier masks each row, so a guess the
  // grammar forbids is rejected and the constrained output stays the same.
  EXPECT_EQ(run(config::SpeculativeMethod::kDraft, draft_obs), plain) << "draft model";
  EXPECT_GT(draft_obs.drafts.load(), 0);
}

// KV compression with drafts (docs/speculative.md, composition rules): a compressing sequence
// drafts, its rounds run after verification on verified slots only, at the same points as
// without speculation (a step ends where a round falls due), so greedy output, logprobs, rounds
// and the eviction audit are unchanged, alone and in a batch. h2o (its attention mass sums a
// step's rows, rejected ones too) decodes without drafts. Nothing leaks.
TEST_P(SpeculativeEngine, CompressingSequencesDraftWithUnchangedOutputAndRounds) {
  constexpr int kVocab = 256;
  using config::CompressionPolicyKind;
  std::vector<CompressionPolicyKind> kinds = {CompressionPolicyKind::kStreamingLlm,
                                              CompressionPolicyKind::kSnapKv,
                                              CompressionPolicyKind::kH2O};
  // The random-weight fixture has no calibration statistics.
  if (std::filesystem::exists(dir_ + "/triattention_stats.bin"))
    kinds.push_back(CompressionPolicyKind::kTriAttention);
  std::vector<RequestSpec> probes;
  for (size_t i = 0; i < kinds.size(); ++i) {
    RequestSpec r =
        Probe("squeezed" + std::to_string(i), Repetitive(60, static_cast<int>(i), kVocab), 40);
    r.compression.policy = kinds[i];
    r.compression.budget = 40;
    r.compression.protect_prompt = false;
    if (kinds[i] == CompressionPolicyKind::kSnapKv) r.compression.window = 8;
    r.compression.audit = true;
    probes.push_back(std::move(r));
  }
  config::Config cfg;
  cfg.compression.divide_length = 16;
  std::vector<Output> want;
  std::vector<RequestUsage> want_usage;
  {
    CountingObserver obs;
    auto engine = Make(cfg, &obs);
    ASSERT_NE(engine, nullptr);
    for (const RequestSpec& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok()) << s.status();
      want_usage.emplace_back();
      want.push_back(CollectWithLogprobs(**s, &want_usage.back()));
      ASSERT_GT(want_usage.back().compression.rounds, 0)
          << p.request_id << ": no compression round ran";
    }
  }
  cfg.speculative.method = config::SpeculativeMethod::kNgram;
  cfg.speculative.ngram_min = 1;
  cfg.speculative.min_acceptance = 0.0;
  SpecObserver obs;
  obs.Hold();  // all in one batch
  auto engine = Make(cfg, &obs);
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (const RequestSpec& p : probes) {
    auto s = engine->Submit(p);
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  obs.Release();
  int64_t accepted = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const std::string& id = probes[i].request_id;
    RequestUsage usage;
    EXPECT_EQ(CollectWithLogprobs(*streams[i], &usage), want[i]) << id;
    const CompressionSummary& got = usage.compression;
    const CompressionSummary& plain = want_usage[i].compression;
    EXPECT_EQ(got.rounds, plain.rounds) << id;
    EXPECT_EQ(got.evicted_tokens, plain.evicted_tokens) << id;
    EXPECT_EQ(got.peak_kv_tokens, plain.peak_kv_tokens) << id;
    ASSERT_EQ(got.audit.size(), plain.audit.size()) << id;
    for (size_t r = 0; r < got.audit.size(); ++r) {
      EXPECT_EQ(got.audit[r].at_token, plain.audit[r].at_token) << id << " round " << r;
      EXPECT_EQ(got.audit[r].positions, plain.audit[r].positions) << id << " round " << r;
    }
    if (kinds[i] == CompressionPolicyKind::kH2O) {
      EXPECT_EQ(usage.spec_draft_tokens, 0) << id;
    } else {
      EXPECT_GT(usage.spec_draft_tokens, 0) << id << " never drafted";
      accepted += usage.spec_accepted_tokens;
      std::printf("%s policy %d: %lld guesses, %lld accepted\n", id.c_str(),
                  static_cast<int>(kinds[i]), static_cast<long long>(usage.spec_draft_tokens),
                  static_cast<long long>(usage.spec_accepted_tokens));
    }
  }
  // Accepted guesses put rows past a round's point only when the draft length is capped right.
  EXPECT_GT(accepted, 0) << "no compressing sequence accepted a guess";
  ExpectNoBlocksLeaked(engine, obs, "compression");
}

INSTANTIATE_TEST_SUITE_P(Models, SpeculativeEngine,
                         ::testing::Values("tests/fixtures/model/llama_f32", "models/kvs-tiny"),
                         [](const auto& p) {
                           return p.index == 0 ? std::string("random_llama")
                                               : std::string("kvs_tiny");
                         });

}  // namespace
}  // namespace kvserve::engine
