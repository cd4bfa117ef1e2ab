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

#include "compression/compression_policy.h"
#include "config/fields.h"
#include "engine/engine_factory.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "speculative/draft_model_check.h"
#include "speculative/draft_model_proposer.h"
#include "speculative/step_cost.h"
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
  static base::SteadyClock clock;
  o.clock = &clock;
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
  // Fixed costs, not timed at start-up: whether a sequence drafts must not depend on the
  // machine the test runs on (a sanitizer build times very differently).
  deps.spec_row_cost = speculative::kDefaultRowCost;
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
  draft->Propose(7, tokens, params, speculative::DraftKv{}, 4, g);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_GT(draft->blocks_in_use(), 0);
  // The same model decoding one token at a time gives the same tokens.
  auto second = LoadDraft(8ull << 20);
  ASSERT_NE(second, nullptr);
  std::vector<int32_t> grown = tokens, one;
  for (int i = 0; i < 4; ++i) {
    second->Propose(1, grown, params, speculative::DraftKv{}, 1, one);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0], g[static_cast<size_t>(i)]) << "guess " << i;
    grown.push_back(one[0]);
  }
  // The target accepted g[0] and emitted another token: the draft continues from there.
  tokens.push_back(g[0]);
  tokens.push_back(g[1] == 5 ? 6 : 5);
  std::vector<int32_t> h;
  draft->Propose(7, tokens, params, speculative::DraftKv{}, 3, h);
  EXPECT_EQ(h.size(), 3u);
  std::vector<int32_t> fresh;
  second->Release(1);
  EXPECT_EQ(second->blocks_in_use(), 0);
  second->Propose(1, tokens, params, speculative::DraftKv{}, 3, fresh);
  EXPECT_EQ(h, fresh) << "a truncated draft KV must guess what a fresh one does";
  draft->Release(7);
  draft->Release(7);  // idempotent
  EXPECT_EQ(draft->blocks_in_use(), 0);
  EXPECT_EQ(draft->num_sequences(), 0);

  // A pool of 2 blocks of 16 slots: a 100-token prompt never fits, a 10-token one does.
  auto small = LoadDraft(2 * 4ull * 2 * 2 * 16 * 48 * sizeof(float));
  ASSERT_NE(small, nullptr);
  small->Propose(1, Prompt(100, 1, kVocab), params, speculative::DraftKv{}, 4, g);
  EXPECT_TRUE(g.empty());
  small->Propose(2, Prompt(10, 1, kVocab), params, speculative::DraftKv{}, 4, g);
  EXPECT_EQ(g.size(), 4u);
  small->Release(1);
  small->Release(2);
  EXPECT_EQ(small->blocks_in_use(), 0);
}

// A compressing sequence's draft KV is held to the request's policy (the draft's own
// KvCompressor): it stays within the budget plus the slack and the guesses, while a full
// one grows with the sequence; `auto` compresses only under pressure; a policy the draft
// cannot run (triattention without the draft's statistics) gives no guesses at all.
TEST(DraftModelProposer, HoldsACompressingSequencesKvToItsPolicy) {
  constexpr int kK = 4;
  constexpr int kPrompt = 40;
  speculative::DraftKv squeeze;
  squeeze.params.kind = config::CompressionPolicyKind::kStreamingLlm;
  squeeze.params.budget = 32;
  squeeze.params.divide_length = 8;  // a round is due at 40 slots
  squeeze.params.protect_prompt = false;
  squeeze.params.prompt_len = kPrompt;
  // The target's side, simulated: each step accepts two guesses and then rejects the third
  // (emits another token), so accepted and rejected guess slots both come and go.
  struct Run {
    int32_t peak_blocks = 0;
    int64_t guesses = 0;
    int64_t rounds = 0;
  };
  auto run = [](speculative::DraftModelProposer& d, const speculative::DraftKv& kv, int vocab,
                int steps) {
    Run r;
    const int64_t rounds_before = d.rounds();
    std::vector<int32_t> tokens = Prompt(kPrompt, 5, vocab);
    tokens.push_back(7);  // the first generated token
    std::vector<int32_t> g;
    for (int i = 0; i < steps; ++i) {
      d.Propose(3, tokens, speculative::SpecParams{}, kv, kK, g);
      r.guesses += static_cast<int64_t>(g.size());
      r.peak_blocks = std::max(r.peak_blocks, d.blocks_in_use());
      if (g.size() >= 3) {
        tokens.insert(tokens.end(), g.begin(), g.begin() + 2);
        tokens.push_back(g[2] == 11 ? 12 : 11);
      } else {
        tokens.push_back(11 + i % 2);
      }
    }
    d.Release(3);
    EXPECT_EQ(d.blocks_in_use(), 0);
    EXPECT_EQ(d.num_sequences(), 0);
    r.rounds = d.rounds() - rounds_before;
    return r;
  };
  auto draft = LoadDraft(8ull << 20);
  ASSERT_NE(draft, nullptr);
  constexpr int kSteps = 60;  // about 220 tokens: 14 blocks of 16 when nothing is evicted
  // After a draft the KV holds under budget + slack verified slots and k - 1 guesses.
  const int32_t bound = static_cast<int32_t>(compression::BlocksFor(32 + 8 - 1 + kK - 1, 16));
  const Run full = run(*draft, speculative::DraftKv{}, kVocab, kSteps);
  EXPECT_GE(full.peak_blocks, compression::BlocksFor(200, 16));
  EXPECT_EQ(full.rounds, 0);
  const Run streaming = run(*draft, squeeze, kVocab, kSteps);
  EXPECT_GT(streaming.rounds, 0);
  EXPECT_LE(streaming.peak_blocks, bound);
  EXPECT_GT(streaming.guesses, kSteps * 3) << "a compressing sequence must still draft";
  speculative::DraftKv tri = squeeze;
  tri.params.kind = config::CompressionPolicyKind::kTriAttention;
  const Run triattention = run(*draft, tri, kVocab, kSteps);  // kvs-tiny ships its statistics
  EXPECT_GT(triattention.rounds, 0);
  EXPECT_LE(triattention.peak_blocks, bound);
  speculative::DraftKv snap = squeeze;
  snap.params.kind = config::CompressionPolicyKind::kSnapKv;  // observes the catch-up queries
  snap.params.window = 8;
  const Run snapkv = run(*draft, snap, kVocab, kSteps);
  EXPECT_GT(snapkv.rounds, 0);
  EXPECT_LE(snapkv.peak_blocks, bound);
  // auto: rounds only while the engine reports pressure.
  speculative::DraftKv calm = tri;
  calm.auto_mode = true;
  EXPECT_EQ(run(*draft, calm, kVocab, kSteps).rounds, 0);
  speculative::DraftKv pressed = calm;
  pressed.pressure = true;
  const Run under_pressure = run(*draft, pressed, kVocab, kSteps);
  EXPECT_GT(under_pressure.rounds, 0);
  EXPECT_LE(under_pressure.peak_blocks, bound);
  EXPECT_LE(draft->peak_blocks_in_use(), full.peak_blocks);

  // A draft model without TriAttention statistics: no guesses for triattention, guesses for
  // the policies that need none.
  model::ModelOptions mo;
  mo.threads = 1;
  auto random = model::LlamaModel::Load(kRandom, mo);
  ASSERT_TRUE(random.ok()) << random.status();
  const int random_vocab = (*random)->config().vocab_size;
  speculative::DraftModelOptions o;
  o.kv_bytes = 8ull << 20;
  base::SteadyClock clock;
  o.clock = &clock;
  auto bare = speculative::DraftModelProposer::Create(std::move(*random), o, base::Logger());
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(run(**bare, tri, random_vocab, 4).guesses, 0);
  EXPECT_GT(run(**bare, squeeze, random_vocab, 4).guesses, 0);
  o.clock = nullptr;
  auto random2 = model::LlamaModel::Load(kRandom, mo);
  ASSERT_TRUE(random2.ok());
  EXPECT_EQ(speculative::DraftModelProposer::Create(std::move(*random2), o, base::Logger())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ProposeBatch drafts several sequences in shared forward passes: each gets the guesses
// Propose gives it alone (the CPU forward is batch-invariant), whether its catch-up is short,
// a whole prompt, or longer than one forward's rows (then chunked alone), compressing or not.
TEST(DraftModelProposer, BatchedDraftsEqualDraftsAlone) {
  auto batched = LoadDraft(8ull << 20);  // 64 rows per forward
  auto alone = LoadDraft(8ull << 20);
  ASSERT_NE(batched, nullptr);
  ASSERT_NE(alone, nullptr);
  speculative::SpecParams params;
  speculative::DraftKv squeeze;
  squeeze.params.kind = config::CompressionPolicyKind::kStreamingLlm;
  squeeze.params.budget = 16;
  squeeze.params.divide_length = 4;
  squeeze.params.protect_prompt = false;
  squeeze.params.prompt_len = 20;
  std::vector<std::vector<int32_t>> tokens = {Prompt(30, 1, kVocab), Prompt(100, 2, kVocab),
                                              Prompt(20, 3, kVocab), Prompt(12, 4, kVocab)};
  const std::vector<int> ks = {4, 3, 2, 1};
  const std::vector<speculative::DraftKv> kvs = {{}, {}, squeeze, {}};
  std::vector<int32_t> guesses, offsets, one;
  for (int step = 0; step < 6; ++step) {
    std::vector<speculative::DraftTask> tasks;
    for (size_t i = 0; i < tokens.size(); ++i) {
      speculative::DraftTask t;
      t.seq = static_cast<int64_t>(i) + 1;
      t.tokens = tokens[i];
      t.params = &params;
      t.kv = kvs[i];
      t.max_tokens = ks[i];
      tasks.push_back(t);
    }
    batched->ProposeBatch(tasks, guesses, offsets);
    ASSERT_EQ(offsets.size(), tasks.size() + 1);
    for (size_t i = 0; i < tasks.size(); ++i) {
      alone->Propose(tasks[i].seq, tokens[i], params, kvs[i], ks[i], one);
      const std::vector<int32_t> got(guesses.begin() + offsets[i],
                                     guesses.begin() + offsets[i + 1]);
      EXPECT_EQ(got, one) << "step " << step << " sequence " << i;
      EXPECT_EQ(static_cast<int>(got.size()), ks[i]) << "step " << step << " sequence " << i;
    }
    // The target accepted the first guess and emitted another token.
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t first = guesses[static_cast<size_t>(offsets[i])];
      tokens[i].push_back(first);
      tokens[i].push_back(first == 9 ? 10 : 9);
    }
  }
  EXPECT_GT(batched->rounds(), 0);
  EXPECT_EQ(batched->rounds(), alone->rounds());
  EXPECT_EQ(batched->blocks_in_use(), alone->blocks_in_use());
  for (int64_t seq = 1; seq <= 4; ++seq) batched->Release(seq);
  EXPECT_EQ(batched->blocks_in_use(), 0);
}

// The start-up step cost (speculative/step_cost.h): a fixed part and a part per row, on a
// scratch pool of the model's own; the ratios the adaptive draft length uses are in range.
TEST(StepCost, MeasuresAFixedPartAndAPartPerRow) {
  model::ModelOptions mo;
  mo.threads = 1;
  auto target = model::LlamaModel::Load(kTiny, mo);
  ASSERT_TRUE(target.ok()) << target.status();
  auto draft = LoadDraft(1ull << 20);
  ASSERT_NE(draft, nullptr);
  base::SteadyClock clock;
  auto t = speculative::MeasureStepCost(**target, clock);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(t->fixed_s, 0.0);
  EXPECT_GE(t->row_s, 0.0);
  EXPECT_LT(t->fixed_s + t->row_s, 1.0) << "a kvs-tiny forward of one row took a second";
  EXPECT_GE(t->row_cost(), 0.01);
  EXPECT_LE(t->row_cost(), 4.0);
  auto d = draft->MeasureStepCost(clock);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_GT(t->guess_cost(*d), 0.0);
  // Measuring leaves the draft's pool alone.
  EXPECT_EQ(draft->blocks_in_use(), 0);
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
  // Alone: a self-draft's greedy guesses are the target's, so all are accepted. The second
  // round's prompts are prefix-cache hits in the target's pool (the draft's own KV has no
  // prefix cache: it catches the whole prompt up at the first draft).
  {
    auto draft = LoadDraft(8ull << 20);
    ASSERT_NE(draft, nullptr);
    DraftObserver obs;
    auto engine = MakeEngine(cfg, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < probes.size(); ++i) {
        RequestSpec p = probes[i];
        p.request_id += std::to_string(round);
        auto s = engine->Submit(p);
        ASSERT_TRUE(s.ok()) << s.status();
        RequestUsage usage;
        EXPECT_EQ(CollectWithLogprobs(**s, &usage), want[i]) << p.request_id;
        EXPECT_GT(usage.spec_draft_tokens, 0) << p.request_id;
        if (round == 1 && p.prompt_tokens.size() >= 16) {
          EXPECT_GT(usage.cached_prompt_tokens, 0) << p.request_id << ": no prefix-cache hit";
        }
      }
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
    for (size_t i = 0; i < probes.size(); ++i)
      EXPECT_EQ(CollectWithLogprobs(*streams[i]), want[i]) << "batched";
    EXPECT_GE(obs.max_batch.load(), 3);
    EXPECT_GT(obs.accepted.load(), 0);
    ExpectNoBlocksLeaked(engine, obs, "batched");
    EXPECT_EQ(draft->blocks_in_use(), 0) << "draft KV blocks still used";
  }
}

// Compressing sequences draft with the draft model too: rounds after verification, output
// and rounds as without speculation, and the draft's own KV held to the same policy (its
// rounds run, and it never holds much more than the first catch-up: the prompt and a token,
// with the k - 1 guesses; without compression it would hold the whole 160-token history).
TEST(DraftModelEngine, CompressingSequenceDraftsWithUnchangedOutputAndRounds) {
  for (auto policy :
       {config::CompressionPolicyKind::kStreamingLlm, config::CompressionPolicyKind::kSnapKv,
        config::CompressionPolicyKind::kTriAttention}) {
    const std::string name(config::Name(policy));
    RequestSpec r = Probe("squeezed", 60, 4, 100);
    r.compression.policy = policy;
    r.compression.budget = 40;
    r.compression.protect_prompt = false;
    if (policy == config::CompressionPolicyKind::kSnapKv) r.compression.window = 8;
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
    ASSERT_GT(want_usage.compression.rounds, 0) << name << ": no compression round ran";
    cfg.speculative.method = config::SpeculativeMethod::kDraft;
    auto draft = LoadDraft(8ull << 20);
    ASSERT_NE(draft, nullptr);
    DraftObserver obs;
    auto engine = MakeEngine(cfg, &obs, draft.get());
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    RequestUsage usage;
    EXPECT_EQ(CollectWithLogprobs(**s, &usage), want) << name;
    EXPECT_EQ(usage.compression.rounds, want_usage.compression.rounds) << name;
    EXPECT_GT(usage.spec_draft_tokens, 0) << name;
    EXPECT_GT(usage.spec_accepted_tokens, 0) << name;
    EXPECT_GT(draft->rounds(), 0) << name << ": the draft's KV was never compressed";
    EXPECT_LE(draft->peak_blocks_in_use(), compression::BlocksFor(60 + 1 + 4 - 1, 16)) << name;
    ExpectNoBlocksLeaked(engine, obs, name.c_str());
    EXPECT_EQ(draft->blocks_in_use(), 0) << name;
  }
}

// The draft model's KV pool comes out of cache.kv_bytes: a request that fits the whole budget
// but not what the draft leaves of it is refused, and a draft pool as large as the budget
// stops the server from starting.
TEST(DraftModelEngine, DraftPoolComesOutOfTheKvBudget) {
  auto mc = model::LoadModelConfig(kTiny);
  ASSERT_TRUE(mc.ok());
  const uint64_t bytes_per_block = static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads *
                                   16 * mc->head_dim * sizeof(float);
  config::Config cfg;
  cfg.cache.block_size = 16;
  cfg.cache.kv_bytes = 16 * bytes_per_block;
  const RequestSpec big = Probe("big", 60, 1, 100);  // 160 tokens: 10 blocks
  {
    CountingObserver obs;
    auto engine = MakeEngine(cfg, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(big);
    ASSERT_TRUE(s.ok()) << s.status();
    Collect(**s);
  }
  cfg.speculative.draft_model = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny-draft";
  cfg.speculative.draft_kv_bytes = 8 * bytes_per_block;
  {
    CountingObserver obs;
    auto engine = MakeEngine(cfg, &obs, nullptr);
    ASSERT_NE(engine, nullptr);
    auto s = engine->Submit(big);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("cache.kv_bytes"), std::string::npos) << s.status();
    auto small = engine->Submit(Probe("small", 20, 2, 20));
    ASSERT_TRUE(small.ok()) << small.status();
    Collect(**small);
  }
  cfg.speculative.draft_kv_bytes = cfg.cache.kv_bytes;
  cfg.engine.threads = 1;
  auto refused = CreateEngine(cfg, kTiny, EngineDeps{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("speculative.draft_kv_bytes"), std::string::npos)
      << refused.status();
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
