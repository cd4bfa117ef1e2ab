// The CPU and CUDA engines on the bundled kvs-tiny model (fp32 weights, fp32 KV) emit the same
// token streams: greedy over 256 tokens for a batch of prompts, seeded sampling with n > 1 (the
// CUDA runner samples non-greedy rows on the host with the CPU's sampler and RNG), and a
// compression policy that evicts (streaming_llm, snapkv, h2o and triattention: compacted on the
// device by CudaKvAccess, triattention scored there too, h2o from the device's attention mass;
// triattention's pooled scores may differ from the CPU's by ~1e-15, which can only matter for
// candidates that tie to that precision). Token
// equality assumes the two forward passes never disagree on an argmax or a sampling interval,
// which holds when logits agree to ~1e-5 (cuda_model_test) and no two candidates are that close;
// a failure here prints the first differing position. Structured outputs: the grammar's mask is
// applied on the CUDA path too (device greedy with the mask uploaded, host sampling with it), so
// constrained streams match the CPU's and spell what the grammar accepts. Speculative decoding
// (n-gram): the CUDA engine's greedy tokens and logprobs with drafts are those it emits without
// (logprobs within twice cuda_model_test's logits bound: verify rows are attended by the tiled
// prefill kernel, plain decode rows by the split-KV kernel), alone, in a batch and with more
// verify rows than the device holds logits for at once, with compression policies that evict and
// under preemption by recompute and swap; sampled requests with drafts finish with their usage
// and no KV block leaked. Needs a GPU (label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include "cache/cache_sizing.h"
#include "config/fields.h"
#include "cuda/cuda_backend.h"
#include "engine/engine_factory.h"
#include "kernels/device_probe.h"
#include "model/model_config.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cuda {
namespace {

using engine::RequestSpec;

struct Stream {
  std::map<int, std::vector<int32_t>> tokens;  // by sample index
  std::string error;
};

Stream Collect(engine::TokenStream& s) {
  Stream out;
  while (!s.done()) {
    auto e = s.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    auto& t = out.tokens[e->sample_index];
    t.insert(t.end(), e->token_ids.begin(), e->token_ids.end());
    if (!e->error.empty()) out.error = e->error;
  }
  return out;
}

std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(261 + (i * 37 + salt * 101) % 1700);
  return p;
}

class CudaEngine : public testing::Test {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
    const char* env = std::getenv("KVSERVE_SOURCE_DIR");  // set by tools/gpu_check.sh --bundle
    dir_ = std::string(env != nullptr ? env : KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/model.safetensors"));
  }

  static config::Config BaseConfig() {
    config::Config cfg;
    cfg.engine.threads = 1;
    cfg.cache.kv_bytes = 64ull << 20;           // CPU pool
    cfg.cache.gpu_memory_utilization = 0.2;     // CUDA pool: plenty for these requests
    cfg.cache.enable_prefix_caching = false;    // same chunking on both backends
    cfg.scheduler.max_num_seqs = 64;
    cfg.model.max_model_len = 2048;
    return cfg;
  }

  std::unique_ptr<engine::ServingEngine> Make(config::Backend backend) { return Make(backend, BaseConfig(), 0); }

  // cuda_blocks > 0 caps the CUDA pool (CudaBackendOptions::max_kv_blocks).
  std::unique_ptr<engine::ServingEngine> Make(config::Backend backend, config::Config cfg,
                                              int32_t cuda_blocks,
                                              engine::EngineObserver* observer = nullptr) {
    cfg.engine.backend = backend;
    engine::EngineDeps deps;
    deps.observer = observer;
    deps.make_cuda_backend = CudaBackendFactoryWith(CudaBackendOptions{cuda_blocks});
    auto e = engine::CreateEngine(cfg, dir_, std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Runs `specs` concurrently on a fresh engine of `backend`.
  std::vector<Stream> Run(config::Backend backend, const std::vector<RequestSpec>& specs) {
    return Run(backend, specs, BaseConfig(), 0);
  }
  std::vector<Stream> Run(config::Backend backend, const std::vector<RequestSpec>& specs, const config::Config& cfg,
                          int32_t cuda_blocks) {
    auto engine = Make(backend, cfg, cuda_blocks);
    std::vector<Stream> out;
    if (engine == nullptr) return out;
    std::vector<std::shared_ptr<engine::TokenStream>> streams;
    for (const auto& s : specs) {
      auto st = engine->Submit(s);
      EXPECT_TRUE(st.ok()) << st.status();
      if (st.ok()) streams.push_back(*st);
    }
    for (auto& s : streams) out.push_back(Collect(*s));
    return out;
  }

  static void ExpectSame(const std::vector<Stream>& cpu, const std::vector<Stream>& gpu, size_t want_len) {
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t r = 0; r < cpu.size(); ++r) {
      EXPECT_TRUE(cpu[r].error.empty()) << cpu[r].error;
      EXPECT_TRUE(gpu[r].error.empty()) << gpu[r].error;
      ASSERT_EQ(cpu[r].tokens.size(), gpu[r].tokens.size()) << "request " << r;
      for (const auto& [sample, toks] : cpu[r].tokens) {
        const auto& g = gpu[r].tokens.at(sample);
        EXPECT_EQ(toks.size(), want_len) << "request " << r << " sample " << sample;
        size_t first = 0;
        while (first < std::min(toks.size(), g.size()) && toks[first] == g[first]) ++first;
        EXPECT_EQ(toks, g) << "request " << r << " sample " << sample << ": first difference at token " << first;
      }
    }
  }

  std::string dir_;
};

RequestSpec Greedy(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec s;
  s.request_id = id;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0.0f;
  return s;
}

TEST_F(CudaEngine, GreedyOutputOver256TokensIsIdenticalToTheCpuEngine) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Greedy("g" + std::to_string(i), Prompt(20 + 37 * i, i), 256));
  ExpectSame(Run(config::Backend::kCpu, specs), Run(config::Backend::kCuda, specs), 256);
}

// Split K/V dtypes and int4 run on the CUDA backend with the CPU's codes (bit-exact writes and
// compaction, exact decoding): greedy streams over 96 tokens equal the CPU engine's.
TEST_F(CudaEngine, SplitAndInt4KvPrecisionsMatchTheCpuEngine) {
  const std::pair<config::KvDtype, config::KvDtype> pairs[] = {{config::KvDtype::kInt4, config::KvDtype::kInt4},
                                                               {config::KvDtype::kInt8, config::KvDtype::kInt4},
                                                               {config::KvDtype::kBf16, config::KvDtype::kInt4},
                                                               {config::KvDtype::kFp16, config::KvDtype::kInt8}};
  for (auto [k, v] : pairs) {
    SCOPED_TRACE(testing::Message() << "k " << static_cast<int>(k) << " v " << static_cast<int>(v));
    config::Config cfg = BaseConfig();
    cfg.cache.k_dtype = k;
    cfg.cache.v_dtype = v;
    cfg.cache.kv_int4_group = 16;
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 4; ++i) specs.push_back(Greedy("p" + std::to_string(i), Prompt(20 + 41 * i, 7 + i), 96));
    ExpectSame(Run(config::Backend::kCpu, specs, cfg, 0), Run(config::Backend::kCuda, specs, cfg, 0), 96);
  }
}

TEST_F(CudaEngine, SeededSamplingWithNGreaterThanOneMatches) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    RequestSpec s = Greedy("s" + std::to_string(i), Prompt(50 + 11 * i, 10 + i), 64);
    s.sampling.temperature = 0.8f;
    s.sampling.top_p = 0.9f;
    s.sampling.seed = 42 + i;
    s.n = 3;
    specs.push_back(s);
  }
  RequestSpec greedy_lp = Greedy("lp", Prompt(40, 99), 64);
  greedy_lp.sampling.logprobs = 2;  // host route: top-N logprobs
  specs.push_back(greedy_lp);
  ExpectSame(Run(config::Backend::kCpu, specs), Run(config::Backend::kCuda, specs), 64);
}

TEST_F(CudaEngine, CompressionPoliciesEvictTheSameTokens) {
  for (auto kind : {config::CompressionPolicyKind::kStreamingLlm, config::CompressionPolicyKind::kSnapKv,
                    config::CompressionPolicyKind::kH2O, config::CompressionPolicyKind::kTriAttention}) {
    SCOPED_TRACE(std::string(config::Name(kind)));
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 2; ++i) {
      RequestSpec s = Greedy("c" + std::to_string(i), Prompt(300, 20 + i), 200);
      s.compression.policy = kind;
      s.compression.budget = 128;
      // The 300-token prompt itself must be compressible: with the default protection a budget
      // of 128 is refused (it must exceed the protected prompt).
      s.compression.protect_prompt = false;
      specs.push_back(s);
    }
    ExpectSame(Run(config::Backend::kCpu, specs), Run(config::Backend::kCuda, specs), 200);
  }
}

TEST_F(CudaEngine, PreemptionByRecomputeAndBySwapEmitsTheCpuEnginesStreams) {
  // A pool of the same few blocks on both backends, so the scheduler preempts at the same steps.
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok()) << mc.status();
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    SCOPED_TRACE(mode == config::PreemptionMode::kSwap ? "swap" : "recompute");
    config::Config cfg = BaseConfig();
    cfg.scheduler.preemption_mode = mode;
    cache::KvLayout layout;
    layout.num_layers = mc->num_layers;
    layout.num_kv_heads = mc->num_kv_heads;
    layout.head_dim = mc->head_dim;
    layout.block_size = cfg.cache.block_size;
    layout.dtype = cfg.cache.kv_dtype;
    cfg.cache.kv_bytes = 48 * layout.bytes_per_block();  // 6 requests x ~21 blocks do not fit
    const int32_t blocks = cache::UsableBlocksForBudget(cfg.cache.kv_bytes, layout);
    ASSERT_GT(blocks, 30);
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 6; ++i) specs.push_back(Greedy("p" + std::to_string(i), Prompt(150 + 13 * i, 60 + i), 160));
    ExpectSame(Run(config::Backend::kCpu, specs, cfg, 0), Run(config::Backend::kCuda, specs, cfg, blocks), 160);
  }
}

// The structured-outputs view of kvs-tiny's vocabulary, built as server::TokenizerTextCodec
// builds it (special tokens, BOS and EOS ids excluded; the primary EOS ends a grammar).
std::shared_ptr<const structured::TokenTrie> TinyTrie(const std::string& dir) {
  auto tok = tokenizer::LoadTokenizerDir(dir);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return nullptr;
  const tokenizer::Tokenizer& t = **tok;
  std::vector<std::string> bytes(static_cast<size_t>(t.vocab_size()));
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    bytes[static_cast<size_t>(id)] = std::string(t.token_decoder().bytes(id));
    if (t.is_special(id)) excluded.push_back(id);
  }
  if (auto bos = t.bos_id()) excluded.push_back(*bos);
  for (int32_t id : t.eos_ids()) excluded.push_back(id);
  return std::make_shared<structured::TokenTrie>(bytes, excluded, t.eos_id().value_or(-1));
}

TEST_F(CudaEngine, StructuredOutputMasksApplyOnTheDeviceAndHostRoutes) {
  auto trie = TinyTrie(dir_);
  ASSERT_NE(trie, nullptr);
  structured::GrammarCache grammars(trie);
  auto regex = grammars.Get({structured::GrammarSpec::Kind::kRegex, "[a-z]+( [a-z]+){3,6}\\.", {}, "guided_regex"});
  ASSERT_TRUE(regex.ok()) << regex.status();
  auto choice = grammars.Get({structured::GrammarSpec::Kind::kChoice, "", {"yes", "no", "maybe later"}, "guided_choice"});
  ASSERT_TRUE(choice.ok()) << choice.status();
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    // Greedy (device route, the mask is uploaded), greedy with top-2 logprobs and seeded
    // sampling (host route, the CPU sampler applies the mask).
    RequestSpec s = Greedy("r" + std::to_string(i), Prompt(30 + 17 * i, 40 + i), 64);
    s.ignore_eos = false;
    s.sampling.grammar = i == 1 ? *choice : *regex;
    if (i == 1) s.sampling.logprobs = 2;
    if (i == 2) {
      s.sampling.temperature = 0.9f;
      s.sampling.seed = 7;
      s.n = 2;
    }
    specs.push_back(s);
  }
  RequestSpec plain = Greedy("plain", Prompt(33, 40), 24);  // unconstrained in the same batch
  specs.push_back(plain);
  const std::vector<Stream> cpu = Run(config::Backend::kCpu, specs);
  const std::vector<Stream> gpu = Run(config::Backend::kCuda, specs);
  ASSERT_EQ(cpu.size(), specs.size());
  ASSERT_EQ(gpu.size(), specs.size());
  for (size_t r = 0; r < specs.size(); ++r) {
    EXPECT_TRUE(gpu[r].error.empty()) << gpu[r].error;
    EXPECT_EQ(cpu[r].tokens, gpu[r].tokens) << "request " << r;
    const auto& grammar = specs[r].sampling.grammar;
    if (grammar == nullptr) continue;
    for (const auto& [sample, toks] : gpu[r].tokens) {
      ASSERT_FALSE(toks.empty()) << "request " << r << " sample " << sample;
      // Every token was allowed where it was drawn: the automaton never dies.
      int32_t state = grammar->start();
      for (size_t k = 0; k < toks.size(); ++k) {
        ASSERT_TRUE(structured::Allowed(grammar->MaskFor(state), toks[k]))
            << "request " << r << " sample " << sample << " token " << k << " (" << toks[k] << ") not allowed";
        state = grammar->Advance(state, toks[k]);
      }
    }
  }
}

// Speculative decoding on the CUDA backend (n-gram drafts, verified by CudaModelRunner).

// A prompt that repeats a 12-token phrase: kvs-tiny's greedy continuation copies it, so n-gram
// guesses are accepted.
std::vector<int32_t> Repetitive(int len, int salt) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(261 + ((i % 12) * 37 + salt * 101) % 1700);
  return p;
}

struct Output {
  std::map<int, std::vector<int32_t>> tokens;  // by sample index
  std::map<int, std::vector<float>> logprobs;
  engine::RequestUsage usage;
  std::string error;
};

Output CollectAll(engine::TokenStream& s) {
  Output out;
  while (!s.done()) {
    auto e = s.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    auto& t = out.tokens[e->sample_index];
    t.insert(t.end(), e->token_ids.begin(), e->token_ids.end());
    for (const auto& lp : e->logprobs) out.logprobs[e->sample_index].push_back(lp.logprob);
    if (e->usage) out.usage = *e->usage;
    if (!e->error.empty()) out.error = e->error;
  }
  return out;
}

// KV blocks in use after the latest step, and the engine's speculation counters.
class SpecStepObserver : public engine::EngineObserver {
 public:
  void OnStep(const engine::StepStats& s) override {
    used_blocks = s.blocks_total - s.blocks_free;
    peak_used_blocks = std::max(peak_used_blocks.load(), used_blocks.load());
    host_used_blocks = s.host_blocks_used;
    draft_tokens += s.spec_draft_tokens;
    accepted += s.spec_accepted_tokens;
  }
  std::atomic<int64_t> used_blocks{-1}, peak_used_blocks{0}, host_used_blocks{-1};
  std::atomic<int64_t> draft_tokens{0}, accepted{0};
};

config::Config NgramConfig(config::Config cfg) {
  cfg.speculative.method = config::SpeculativeMethod::kNgram;
  cfg.speculative.num_tokens = 4;
  cfg.speculative.ngram_min = 1;
  cfg.speculative.min_acceptance = 0.0;  // draft every step: the worst case for exactness
  return cfg;
}

// Greedy, with the token logprobs (logprobs 0: still the device route).
RequestSpec Probe(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec s = Greedy(id, std::move(prompt), max_tokens);
  s.sampling.logprobs = 0;
  return s;
}

// Logprobs of the same tokens from verify rows (tiled prefill attention) and decode rows
// (split-KV attention): twice the logits' 2e-3 bound of cuda_model_test.
constexpr float kLogprobTol = 4e-3f;

void ExpectSameGreedy(const Output& want, const Output& got, const std::string& what) {
  EXPECT_TRUE(got.error.empty()) << what << ": " << got.error;
  ASSERT_EQ(want.tokens.size(), got.tokens.size()) << what;
  for (const auto& [sample, toks] : want.tokens) {
    const auto& g = got.tokens.at(sample);
    size_t first = 0;
    while (first < std::min(toks.size(), g.size()) && toks[first] == g[first]) ++first;
    EXPECT_EQ(toks, g) << what << " sample " << sample << ": first difference at token " << first;
    const auto& wl = want.logprobs.count(sample) ? want.logprobs.at(sample) : std::vector<float>{};
    const auto& gl = got.logprobs.count(sample) ? got.logprobs.at(sample) : std::vector<float>{};
    ASSERT_EQ(wl.size(), gl.size()) << what << " sample " << sample;
    for (size_t i = 0; i < wl.size(); ++i) {
      EXPECT_NEAR(wl[i], gl[i], kLogprobTol) << what << " sample " << sample << " token " << i;
    }
  }
}

using EngineMaker = std::function<std::unique_ptr<engine::ServingEngine>(const config::Config&,
                                                                         engine::EngineObserver*)>;

// Runs `specs` on a fresh engine: `batched` submits them all at once, otherwise each request
// finishes before the next. With an observer, checks afterwards that no KV block is still held.
std::vector<Output> RunOutputs(const EngineMaker& make, const config::Config& cfg,
                               const std::vector<RequestSpec>& specs, bool batched,
                               SpecStepObserver* obs) {
  std::vector<Output> out;
  auto engine = make(cfg, obs);
  if (engine == nullptr) return out;
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (const auto& s : specs) {
    auto st = engine->Submit(s);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) continue;
    if (batched) {
      streams.push_back(*st);
    } else {
      out.push_back(CollectAll(**st));
    }
  }
  for (auto& s : streams) out.push_back(CollectAll(*s));
  engine.reset();  // joins the engine loop: its last step has been reported
  if (obs != nullptr) {
    EXPECT_GT(obs->peak_used_blocks.load(), 0);
    EXPECT_EQ(obs->used_blocks.load(), 0) << "KV blocks still used after every request ended";
    EXPECT_LE(obs->host_used_blocks.load(), 0) << "host swap blocks still used";
  }
  return out;
}

TEST_F(CudaEngine, NgramSpeculationGivesThePlainGreedyTokensAndLogprobs) {
  auto trie = TinyTrie(dir_);
  ASSERT_NE(trie, nullptr);
  structured::GrammarCache grammars(trie);
  auto regex = grammars.Get(
      {structured::GrammarSpec::Kind::kRegex, "[a-z]+( [a-z]+){3,6}\\.", {}, "guided_regex"});
  ASSERT_TRUE(regex.ok()) << regex.status();
  // Copy-heavy greedy probes (device route), one with top-2 logprobs (host route: Sampler::Verify
  // on copied rows), one constrained by a grammar (device route with per-row masks) and one on a
  // free prompt.
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 5; ++i)
    specs.push_back(Probe("copy" + std::to_string(i), Repetitive(60 + 9 * i, i), 48));
  specs[1].sampling.logprobs = 2;
  RequestSpec constrained = Probe("regex", Repetitive(40, 7), 48);
  constrained.ignore_eos = false;
  constrained.sampling.grammar = *regex;
  specs.push_back(constrained);
  specs.push_back(Probe("free", Prompt(50, 3), 32));

  auto make = [&](const config::Config& cfg, engine::EngineObserver* obs) {
    return Make(config::Backend::kCuda, cfg, 0, obs);
  };
  config::Config few_rows = BaseConfig();
  // 3 sequences' worth of device logits: 1 + k verify rows each come back in several windows.
  few_rows.scheduler.max_num_seqs = 3;
  const std::pair<const char*, std::pair<config::Config, bool>> cases[] = {
      {"alone", {BaseConfig(), false}},
      {"batch", {BaseConfig(), true}},
      {"batch, max_num_seqs 3", {few_rows, true}}};
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    // The reference: the same engine configuration without speculation.
    const std::vector<Output> want = RunOutputs(make, c.first, specs, c.second, nullptr);
    ASSERT_EQ(want.size(), specs.size());
    SpecStepObserver obs;
    const std::vector<Output> got = RunOutputs(make, NgramConfig(c.first), specs, c.second, &obs);
    ASSERT_EQ(got.size(), specs.size());
    int64_t usage_drafted = 0, usage_accepted = 0, copy_accepted = 0;
    for (size_t r = 0; r < specs.size(); ++r) {
      ExpectSameGreedy(want[r], got[r], specs[r].request_id);
      EXPECT_LE(got[r].usage.spec_accepted_tokens, got[r].usage.spec_draft_tokens)
          << specs[r].request_id;
      const size_t emitted = got[r].tokens.count(0) != 0 ? got[r].tokens.at(0).size() : 0;
      EXPECT_EQ(got[r].usage.completion_tokens, static_cast<int64_t>(emitted))
          << specs[r].request_id;
      usage_drafted += got[r].usage.spec_draft_tokens;
      usage_accepted += got[r].usage.spec_accepted_tokens;
      if (specs[r].request_id.starts_with("copy"))
        copy_accepted += got[r].usage.spec_accepted_tokens;
    }
    EXPECT_GT(copy_accepted, 0) << "the copy-heavy probes accepted no guess";
    EXPECT_EQ(usage_drafted, obs.draft_tokens.load());
    EXPECT_EQ(usage_accepted, obs.accepted.load());
  }
}

// Drafts with KV compression (rounds after verification: RejectGuesses drops rejected slots
// from the table and the policy state; h2o never drafts) and under preemption by recompute and
// by swap (a pool of a few blocks): the greedy tokens and logprobs of the same engine without
// speculation, guesses accepted, no block leaked.
TEST_F(CudaEngine, NgramSpeculationWithCompressionAndPreemptionKeepsTheGreedyTokens) {
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok()) << mc.status();
  struct Case {
    std::string name;
    config::Config cfg;
    int32_t cuda_blocks = 0;
    std::vector<RequestSpec> specs;
  };
  std::vector<Case> cases;
  for (auto kind :
       {config::CompressionPolicyKind::kStreamingLlm, config::CompressionPolicyKind::kSnapKv}) {
    Case c{std::string(config::Name(kind)), BaseConfig(), 0, {}};
    for (int i = 0; i < 2; ++i) {
      RequestSpec s = Probe("c" + std::to_string(i), Repetitive(300, 20 + i), 160);
      s.compression.policy = kind;
      s.compression.budget = 128;
      s.compression.protect_prompt = false;  // the 300-token prompt itself is compressed
      c.specs.push_back(s);
    }
    cases.push_back(std::move(c));
  }
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    Case c{mode == config::PreemptionMode::kSwap ? "swap" : "recompute", BaseConfig(), 0, {}};
    c.cfg.scheduler.preemption_mode = mode;
    cache::KvLayout layout;
    layout.num_layers = mc->num_layers;
    layout.num_kv_heads = mc->num_kv_heads;
    layout.head_dim = mc->head_dim;
    layout.block_size = c.cfg.cache.block_size;
    layout.dtype = c.cfg.cache.kv_dtype;
    c.cfg.cache.kv_bytes = 48 * layout.bytes_per_block();  // 6 requests x ~21 blocks do not fit
    c.cuda_blocks = cache::UsableBlocksForBudget(c.cfg.cache.kv_bytes, layout);
    for (int i = 0; i < 6; ++i) {
      c.specs.push_back(Probe("p" + std::to_string(i), Repetitive(150 + 13 * i, 60 + i), 160));
    }
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto make = [&](const config::Config& cfg, engine::EngineObserver* obs) {
      return Make(config::Backend::kCuda, cfg, c.cuda_blocks, obs);
    };
    const std::vector<Output> want = RunOutputs(make, c.cfg, c.specs, true, nullptr);
    ASSERT_EQ(want.size(), c.specs.size());
    SpecStepObserver obs;
    const std::vector<Output> got = RunOutputs(make, NgramConfig(c.cfg), c.specs, true, &obs);
    ASSERT_EQ(got.size(), c.specs.size());
    for (size_t r = 0; r < c.specs.size(); ++r)
      ExpectSameGreedy(want[r], got[r], c.specs[r].request_id);
    EXPECT_GT(obs.accepted.load(), 0) << "no guess accepted";
  }
}

TEST_F(CudaEngine, SampledRequestsWithNgramSpeculationFinishWithTheirUsage) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    RequestSpec s = Greedy("s" + std::to_string(i), Repetitive(50 + 11 * i, 10 + i), 48);
    s.sampling.temperature = 0.8f;
    s.sampling.top_p = 0.95f;
    s.sampling.seed = 42 + i;
    s.n = 2;
    specs.push_back(s);
  }
  SpecStepObserver obs;
  auto engine = Make(config::Backend::kCuda, NgramConfig(BaseConfig()), 0, &obs);
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (const auto& s : specs) {
    auto st = engine->Submit(s);
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  for (size_t r = 0; r < specs.size(); ++r) {
    const Output out = CollectAll(*streams[r]);
    EXPECT_TRUE(out.error.empty()) << out.error;
    ASSERT_EQ(out.tokens.size(), 2u) << "request " << r;
    for (const auto& [sample, toks] : out.tokens) {
      EXPECT_EQ(toks.size(), 48u) << "request " << r << " sample " << sample;
    }
    EXPECT_EQ(out.usage.prompt_tokens, static_cast<int64_t>(specs[r].prompt_tokens.size()));
    EXPECT_EQ(out.usage.completion_tokens, 96);
    EXPECT_LE(out.usage.spec_accepted_tokens, out.usage.spec_draft_tokens);
  }
  engine.reset();
  EXPECT_GT(obs.draft_tokens.load(), 0) << "no sampled sequence drafted";
  EXPECT_GT(obs.peak_used_blocks.load(), 0);
  EXPECT_EQ(obs.used_blocks.load(), 0) << "KV blocks still used after every request ended";
  EXPECT_LE(obs.host_used_blocks.load(), 0) << "host swap blocks still used";
}

}  // namespace
}  // namespace kvserve::cuda
