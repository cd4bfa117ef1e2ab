// Draft-model speculation (method draft) on kvs-tiny: the proposer's own KV (catch-up,
// truncation after a rejection, release, no room), the start-up tokenizer check, and through
// the engine greedy output equal to plain decoding token for token and logprob for logprob,
// alone and batched, with both KV pools empty after the requests, under preemption too.
// kvs-tiny mostly drafts for itself here: its greedy guesses are then exactly the target's, so
// every guess is accepted (that proves the proposer's KV bookkeeping); the bundled
// models/kvs-tiny-draft, whose guesses are often wrong, checks exactness under rejections (its
// acceptance is a benchmark figure, docs/benchmarks.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/engine_factory.h"
#include "model/model_config.h"
#include "speculative/draft_model_check.h"
#include "speculative/draft_model_proposer.h"
#include "tests/integration/engine/engine_test_util.h"

namespace kvserve::engine {
namespace {

const std::string kTiny = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
const std::string kRandom = std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32";
constexpr int kVocab = 2048;

using Output = TokensAndLogprobs;
using DraftObserver = SpecObserver;

RequestSpec Probe(const std::string& id, int len, int salt, int max_tokens) {
  RequestSpec r = Greedy(id, Prompt(len, salt, kVocab), max_tokens);
  r.sampling.logprobs = 1;
  return r;
}

std::unique_ptr<speculative::DraftModelProposer> LoadDraft(uint64_t kv_bytes, int block_size = 16) {
  speculative::DraftModelOptions o;
  o.block_size = block_size;
  o.kv_bytes = kv_bytes;
  o.threads = 1;
  o.max_tokens_per_step = 64;  // a 100-token prompt catches up in two forwards
  auto d = speculative::DraftModelProposer::Load(kTiny, kVocab, o, base::Logger());
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

std::unique_ptr<ServingEngine> MakeEngine(config::Config cfg, EngineObserver* obs,
                                          speculative::DraftProposer* draft) {
  cfg.engine.threads = 1;
  EngineDeps deps;
  deps.observer = obs;
  deps.draft_proposer = draft;
  auto e = CreateEngine(cfg, kTiny, std::move(deps));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// The proposer alone: its guesses are kvs-tiny's greedy continuation; after a rejection it
// keeps the verified prefix of its KV only; Release empties its pool; no room is no guesses.
TEST(DraftModelProposer, CatchesUpTruncatesReleasesAndRunsOutOfRoomQuietly) {
  auto draft = LoadDraft(8ull << 20);
  ASSERT_NE(draft, nullptr);
  speculative::SpecParams params;
  std::vector<int32_t> tokens = Prompt(100, 3, kVocab);
  std::vector<int32_t> g;
  draft->Propose(7, tokens, params, 4, g);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_GT(draft->blocks_in_use(), 0);
  // The same model decoding one token at a time gives the same tokens.
  auto second = LoadDraft(8ull << 20);
  ASSERT_NE(second, nullptr);
  std::vector<int32_t> grown = tokens, one;
  for (int i = 0; i < 4; ++i) {
    second->Propose(1, grown, params, 1, one);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0], g[static_cast<size_t>(i)]) << "guess " << i;
    grown.push_back(one[0]);
  }
  // The target accepted g[0] and emitted another token: the draft continues from there.
  tokens.push_back(g[0]);
  tokens.push_back(g[1] == 5 ? 6 : 5);
  std::vector<int32_t> h;
  draft->Propose(7, tokens, params, 3, h);
  EXPECT_EQ(h.size(), 3u);
  std::vector<int32_t> fresh;
  second->Release(1);
  EXPECT_EQ(second->blocks_in_use(), 0);
  second->Propose(1, tokens, params, 3, fresh);
  EXPECT_EQ(h, fresh) << "a truncated draft KV must guess what a fresh one does";
  draft->Release(7);
  draft->Release(7);  // idempotent
  EXPECT_EQ(draft->blocks_in_use(), 0);
  EXPECT_EQ(draft->num_sequences(), 0);

  // A pool of 2 blocks of 16 slots: a 100-token prompt never fits, a 10-token one does.
  auto small = LoadDraft(2 * 4ull * 2 * 2 * 16 * 48 * sizeof(float));
  ASSERT_NE(small, nullptr);
  small->Propose(1, Prompt(100, 1, kVocab), params, 4, g);
  EXPECT_TRUE(g.empty());
  small->Propose(2, Prompt(10, 1, kVocab), params, 4, g);
  EXPECT_EQ(g.size(), 4u);
  small->Release(1);
  small->Release(2);
  EXPECT_EQ(small->blocks_in_use(), 0);
}

// Start-up check: a draft must share the target's tokenizer, id for id, not just its size.
TEST(DraftModelCheck, RefusesAnotherVocabularyOrTokenizer) {
  EXPECT_TRUE(speculative::CheckDraftCompatible(kTiny, kVocab, kTiny, kVocab).ok());
  auto random = model::LoadModelConfig(kRandom);
  ASSERT_TRUE(random.ok());
  absl::Status size = speculative::CheckDraftCompatible(kTiny, kVocab, kRandom, random->vocab_size);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("speculative.draft_model"), std::string::npos) << size;
  EXPECT_NE(size.message().find("vocabulary"), std::string::npos) << size;
  // Same size, two pieces' ids swapped: a tokenizer.json made here from kvs-tiny's.
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("kvs_draft_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
       std::to_string(reinterpret_cast<uintptr_t>(&size)));
  std::filesystem::create_directories(dir);
  std::ifstream in(kTiny + "/tokenizer.json");
  std::stringstream buf;
  buf << in.rdbuf();
  std::string json = buf.str();
  // "▁the" and "▁and" trade ids (both are pieces of this English BPE vocabulary).
  const std::string a = "\"\u2581the\": ", b = "\"\u2581and\": ";
  const size_t pa = json.find(a), pb = json.find(b);
  ASSERT_NE(pa, std::string::npos);
  ASSERT_NE(pb, std::string::npos);
  const size_t ea = json.find_first_of(",}", pa + a.size()),
               eb = json.find_first_of(",}", pb + b.size());
  const std::string ida = json.substr(pa + a.size(), ea - pa - a.size());
  const std::string idb = json.substr(pb + b.size(), eb - pb - b.size());
  std::string swapped = json;
  // Replace the later one first so the earlier offsets stay valid.
  if (pa < pb) {
    swapped.replace(pb + b.size(), idb.size(), ida);
    swapped.replace(pa + a.size(), ida.size(), idb);
  } else {
    swapped.replace(pa + a.size(), ida.size(), idb);
    swapped.replace(pb + b.size(), idb.size(), ida);
  }
  std::ofstream(dir / "tokenizer.json") << swapped;
  absl::Status ids = speculative::CheckDraftCompatible(kTiny, kVocab, dir.string(), kVocab);
  EXPECT_EQ(ids.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.message().find("token id"), std::string::npos) << ids;
  std::filesystem::remove_all(dir);

  // Through the engine: the server refuses to start.
  config::Config cfg;
  cfg.engine.threads = 1;
  cfg.speculative.method = config::SpeculativeMethod::kDraft;
  cfg.speculative.draft_model = kRandom;
  auto e = CreateEngine(cfg, kTiny, EngineDeps{});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("speculative.draft_model"), std::string::npos) << e.status();
}

TEST(DraftModelEngine, MethodDraftWithoutADraftModelIsRefusedPerRequest) {
  config::Config cfg;
  CountingObserver obs;
  auto engine = MakeEngine(cfg, &obs, nullptr);
  ASSERT_NE(engine, nullptr);
  RequestSpec r = Probe("d", 10, 1, 4);
  r.speculative.method = config::SpeculativeMethod::kDraft;
  auto s = engine->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("speculative.method"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("no"), std::string::npos) << s.status();
}

TEST(DraftModelEngine, GreedyOutputEqualsPlainDecodingAloneAndBatched) {
  const std::vector<RequestSpec> probes = {Probe("a", 40, 1, 24), Probe("b", 70, 2, 20),
                                           Probe("c", 12, 3, 28)};
  std::vector<Output> want;
  {
    CountingObserver obs;
    auto engine = MakeEngine(config::Config{}, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    for (const auto& p : probes) {
      auto s = engine->Submit(p);
      ASSERT_TRUE(s.ok()) << s.status();
      want.push_back(CollectWithLogprobs(**s));
    }
  }
  config::Config cfg;
  cfg.speculative.method = config::SpeculativeMethod::kDraft;
  cfg.speculative.num_tokens = 4;
  // Alone: a self-draft's greedy guesses are the target's, so all are accepted.
  {
    auto draft = LoadDraft(8ull << 20);
    ASSERT_NE(draft, nullptr);
    DraftObserver obs;
    auto engine = MakeEngine(cfg, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    for (size_t i = 0; i < probes.size(); ++i) {
      auto s = engine->Submit(probes[i]);
      ASSERT_TRUE(s.ok()) << s.status();
      RequestUsage usage;
      EXPECT_EQ(CollectWithLogprobs(**s, &usage), want[i]) << probes[i].request_id;
      EXPECT_GT(usage.spec_draft_tokens, 0) << probes[i].request_id;
    }
    EXPECT_GT(obs.draft_tokens.load(), 0);
    EXPECT_EQ(obs.accepted.load(), obs.draft_tokens.load()) << "a self-draft guessed wrong";
    ExpectNoBlocksLeaked(engine, obs, "alone");
    EXPECT_EQ(draft->blocks_in_use(), 0) << "draft KV blocks still used";
    EXPECT_EQ(draft->num_sequences(), 0);
  }
  // The bundled draft, loaded by CreateEngine from speculative.draft_model (tokenizer checked):
  // its guesses are often wrong, the output is still the target's.
  {
    config::Config real = cfg;
    real.speculative.draft_model = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny-draft";
    real.speculative.min_acceptance = 0.0;  // draft every step: the worst case for exactness
    DraftObserver obs;
    auto engine = MakeEngine(real, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    for (size_t i = 0; i < probes.size(); ++i) {
      auto s = engine->Submit(probes[i]);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(CollectWithLogprobs(**s), want[i]) << probes[i].request_id << " (kvs-tiny-draft)";
    }
    EXPECT_GT(obs.accepted.load(), 0) << "kvs-tiny-draft never guessed right";
    EXPECT_LT(obs.accepted.load(), obs.draft_tokens.load()) << "kvs-tiny-draft never guessed wrong";
    ExpectNoBlocksLeaked(engine, obs, "kvs-tiny-draft");
  }
  // Batched, and per request on a server whose default is none.
  {
    auto draft = LoadDraft(8ull << 20);
    ASSERT_NE(draft, nullptr);
    DraftObserver obs;
    obs.Hold();
    auto engine = MakeEngine(config::Config{}, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (const auto& p : probes) {
      RequestSpec r = p;
      r.speculative.method = config::SpeculativeMethod::kDraft;
      auto s = engine->Submit(r);
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    obs.Release();
    for (size_t i = 0; i < probes.size(); ++i) EXPECT_EQ(CollectWithLogprobs(*streams[i]), want[i]) << "batched";
    EXPECT_GE(obs.max_batch.load(), 3);
    EXPECT_GT(obs.accepted.load(), 0);
    ExpectNoBlocksLeaked(engine, obs, "batched");
    EXPECT_EQ(draft->blocks_in_use(), 0) << "draft KV blocks still used";
  }
}

// Compressing sequences draft with the draft model too (rounds after verification; the
// draft's own KV keeps the whole history): output and rounds as without speculation.
TEST(DraftModelEngine, CompressingSequenceDraftsWithUnchangedOutputAndRounds) {
  RequestSpec r = Probe("squeezed", 60, 4, 40);
  r.compression.policy = config::CompressionPolicyKind::kStreamingLlm;
  r.compression.budget = 40;
  r.compression.protect_prompt = false;
  config::Config cfg;
  cfg.compression.divide_length = 16;
  Output want;
  RequestUsage want_usage;
  {
    CountingObserver obs;
    auto engine = MakeEngine(cfg, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    want = CollectWithLogprobs(**s, &want_usage);
  }
  ASSERT_GT(want_usage.compression.rounds, 0) << "no compression round ran";
  cfg.speculative.method = config::SpeculativeMethod::kDraft;
  auto draft = LoadDraft(8ull << 20);
  ASSERT_NE(draft, nullptr);
  DraftObserver obs;
  auto engine = MakeEngine(cfg, &obs, draft.get());
  ASSERT_NE(engine, nullptr);
  auto s = engine->Submit(r);
  ASSERT_TRUE(s.ok()) << s.status();
  RequestUsage usage;
  EXPECT_EQ(CollectWithLogprobs(**s, &usage), want);
  EXPECT_EQ(usage.compression.rounds, want_usage.compression.rounds);
  EXPECT_GT(usage.spec_draft_tokens, 0);
  ExpectNoBlocksLeaked(engine, obs, "compression");
  EXPECT_EQ(draft->blocks_in_use(), 0);
}

// A target pool that forces preemption (recompute and swap) and a draft pool too small for
// every sequence at once: output unchanged, both pools empty at the end.
TEST(DraftModelEngine, BothPoolsEmptyAfterPreemptionAndNoRoomInTheDraftPool) {
  auto mc = model::LoadModelConfig(kTiny);
  ASSERT_TRUE(mc.ok());
  const uint64_t bytes_per_block = static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads *
                                   16 * mc->head_dim * sizeof(float);
  const RequestSpec probe = Probe("probe", 50, 0, 20);
  Output want;
  {
    CountingObserver obs;
    auto engine = MakeEngine(config::Config{}, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(probe);
    ASSERT_TRUE(s.ok());
    want = CollectWithLogprobs(**s);
  }
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    config::Config cfg;
    cfg.speculative.method = config::SpeculativeMethod::kDraft;
    cfg.scheduler.preemption_mode = mode;
    cfg.cache.block_size = 16;
    cfg.cache.kv_bytes = 9 * bytes_per_block;  // two 50-token prompts fit, not their growth
    cfg.cache.host_swap_bytes = 64 * bytes_per_block;
    auto draft = LoadDraft(10 * bytes_per_block);  // two sequences at a time, not six
    ASSERT_NE(draft, nullptr);
    DraftObserver obs;
    obs.Hold();
    auto engine = MakeEngine(cfg, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    auto ps = engine->Submit(probe);
    ASSERT_TRUE(ps.ok()) << ps.status();
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 5; ++i) {
      auto st = engine->Submit(Greedy("p" + std::to_string(i), Prompt(50, i + 7, kVocab), 40));
      ASSERT_TRUE(st.ok());
      streams.push_back(*st);
    }
    obs.Release();
    const char* where = mode == config::PreemptionMode::kSwap ? "swap" : "recompute";
    EXPECT_EQ(CollectWithLogprobs(**ps), want) << where;
    for (auto& st : streams) EXPECT_EQ(Collect(*st).size(), 40u) << where;
    EXPECT_GT(obs.preemptions.load(), 0)
        << where << ": the pool was meant to force preemption (batch " << obs.max_batch.load()
        << ", peak blocks " << obs.peak_used_blocks.load() << ")";
    EXPECT_GT(obs.drafts.load(), 0) << where;
    ExpectNoBlocksLeaked(engine, obs, where);
    EXPECT_EQ(draft->blocks_in_use(), 0) << where << ": draft KV blocks still used";
    EXPECT_EQ(draft->num_sequences(), 0) << where;
  }
}

}  // namespace
}  // namespace kvserve::engine
