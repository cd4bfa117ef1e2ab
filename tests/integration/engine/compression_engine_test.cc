// Per-request KV compression through the whole engine on the bundled kvs-tiny model:
// lossless when the budget covers the sequence, a bounded footprint on long generations,
// an audit record that names exactly what was evicted, auto mode on the pool watermark,
// errors that name the field, and no leaked block in any of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>

#include "cache/host_kv_cache.h"
#include "config/fields.h"
#include "engine/engine_factory.h"
#include "engine/request_compression.h"
#include "model/model_config.h"

namespace kvserve::engine {
namespace {

using config::CompressionPolicyKind;

class Recorder : public EngineObserver {
 public:
  void OnStep(const StepStats& s) override {
    used_blocks = s.blocks_total - s.blocks_free;
    host_used_blocks = s.host_blocks_used;
    demote_used_blocks = s.demote_blocks_used;
    max_demote_used = std::max(max_demote_used.load(), s.demote_blocks_used);
    max_physical = std::max(max_physical.load(), s.live_physical_tokens);
    preemptions += s.preemptions;
    if (steps == 0) {
      std::lock_guard<std::mutex> lock(mu);
      for (const KvTierPrecision& t : s.demote_tiers) tier_labels.push_back(t.k_label + "/" + t.v_label);
    }
    ++steps;
  }
  void OnRequestRejected(const RequestLabels& labels, const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu);
    rejections.push_back(labels.tenant + "/" + labels.policy + ":" + reason);
  }
  void OnCompressionRound(const CompressionRoundStats& r) override {
    std::lock_guard<std::mutex> lock(mu);
    rounds.push_back(r);
  }
  std::atomic<int64_t> used_blocks{-1}, host_used_blocks{-1}, max_physical{0}, steps{0};
  std::atomic<int64_t> demote_used_blocks{-1}, max_demote_used{0};
  std::atomic<int> preemptions{0};
  std::mutex mu;
  std::vector<CompressionRoundStats> rounds;
  std::vector<std::string> rejections;
  std::vector<std::string> tier_labels;  // K/V labels of the demotion tiers (first step)
};

struct Outcome {
  std::vector<int32_t> tokens;  // sample 0
  std::vector<float> logprobs;
  std::optional<RequestUsage> usage;
  std::optional<FinishReason> finish;
  std::string error;
};

Outcome Collect(TokenStream& stream) {
  Outcome o;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    if (e->sample_index == 0) {
      o.tokens.insert(o.tokens.end(), e->token_ids.begin(), e->token_ids.end());
      for (const auto& lp : e->logprobs) o.logprobs.push_back(lp.logprob);
    }
    if (e->usage) o.usage = e->usage;
    if (e->finish && e->sample_index == 0) o.finish = e->finish;
    if (!e->error.empty()) o.error = e->error;
  }
  return o;
}

// Real text so that attention is not degenerate: the model's own greedy continuation of a
// KJV-style opening is regular enough, but tokens of English are better; use fixed ids from
// the tokenizer's merged range.
std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(261 + (i * 37 + salt * 101) % 1700);
  return p;
}

RequestSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_tokens, float temperature = 0.0f) {
  RequestSpec s;
  s.request_id = id;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = temperature;
  s.sampling.seed = 1234;
  s.sampling.logprobs = 0;
  return s;
}

class CompressionEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/triattention_stats.bin"));
    auto mc = model::LoadModelConfig(dir_);
    ASSERT_TRUE(mc.ok()) << mc.status();
    bytes_per_block_ = static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * 16 * mc->head_dim * sizeof(float);
  }

  std::unique_ptr<ServingEngine> Make(config::Config cfg, EngineObserver* obs) {
    cfg.engine.threads = 1;
    cfg.model.max_model_len = 2048;
    EngineDeps deps;
    deps.observer = obs;
    auto e = CreateEngine(cfg, dir_, std::move(deps));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  Outcome Run(ServingEngine& engine, const RequestSpec& spec) {
    auto st = engine.Submit(spec);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return {};
    return Collect(**st);
  }

  static void ExpectNoLeaks(std::unique_ptr<ServingEngine>& engine, const Recorder& rec) {
    engine.reset();
    ASSERT_GT(rec.steps.load(), 0);
    EXPECT_EQ(rec.used_blocks.load(), 0) << "KV blocks still used after every request ended";
    EXPECT_EQ(rec.host_used_blocks.load(), 0) << "host swap blocks still used";
    EXPECT_LE(rec.demote_used_blocks.load(), 0) << "demotion tier blocks still granted";
  }

  std::string dir_;
  uint64_t bytes_per_block_ = 0;
};

// The demotion tests' engine: a roomy pool, an 8 MiB tier pool, no prefix cache (each run
// starts cold), TriAttention rounds every 32 tokens.
config::Config DemotingConfig() {
  config::Config cfg;
  cfg.cache.kv_bytes = 64ull << 20;
  cfg.cache.demote_kv_bytes = 8ull << 20;
  cfg.cache.enable_prefix_caching = false;
  cfg.compression.divide_length = 32;
  return cfg;
}

// `plain` under TriAttention with a 64-token budget and nothing demoted.
RequestSpec Evicting(const RequestSpec& plain) {
  RequestSpec evict = plain;
  evict.request_id = "evict";
  evict.compression.policy = CompressionPolicyKind::kTriAttention;
  evict.compression.budget = 64;
  return evict;
}

TEST_F(CompressionEngine, FullAndLargeBudgetsAreBitIdenticalToNoCompression) {
  Recorder rec;
  config::Config cfg;
  cfg.cache.kv_bytes = 64ull << 20;
  // Same prefill chunking and no prefix hits on every path: chunk boundaries change the
  // GEMM shapes and with them the last bits of the logits (as in every engine), which is not
  // what this test is about.
  cfg.cache.enable_prefix_caching = false;
  cfg.compression.max_prefill_chunk = 2048;
  auto engine = Make(cfg, &rec);
  ASSERT_NE(engine, nullptr);
  for (float temperature : {0.0f, 0.9f}) {
    RequestSpec plain = Spec("plain", Prompt(300, 1), 64, temperature);
    plain.sampling.logprobs = 1;
    const Outcome ref = Run(*engine, plain);
    ASSERT_EQ(ref.tokens.size(), 64u);
    ASSERT_EQ(ref.logprobs.size(), 64u);
    for (auto kind : {CompressionPolicyKind::kFull, CompressionPolicyKind::kTriAttention,
                      CompressionPolicyKind::kSnapKv, CompressionPolicyKind::kH2O, CompressionPolicyKind::kAuto}) {
      for (bool protect : {true, false}) {
        RequestSpec s = plain;
        s.request_id = "c";
        s.compression.policy = kind;
        s.compression.budget = 400;  // >= prompt + max_tokens: a round never has anything to evict
        s.compression.protect_prompt = protect;
        const Outcome o = Run(*engine, s);
        const std::string what = std::string(config::Name(kind)) + (protect ? " protected" : " unprotected") +
                                 " T=" + std::to_string(temperature);
        EXPECT_EQ(o.tokens, ref.tokens) << what;
        EXPECT_EQ(o.logprobs, ref.logprobs) << what;  // bitwise: same floats
        ASSERT_TRUE(o.usage.has_value()) << what;
        EXPECT_EQ(o.usage->compression.rounds, 0) << what;
        EXPECT_EQ(o.usage->compression.evicted_tokens, 0) << what;
        EXPECT_DOUBLE_EQ(o.usage->compression.compression_ratio, 1.0) << what;
      }
    }
  }
  EXPECT_TRUE(rec.rounds.empty());
  ExpectNoLeaks(engine, rec);
}

TEST_F(CompressionEngine, LongGenerationStaysUnderBudgetPlusSlackPlusOneBlock) {
  const int kBudget = 128, kSlack = 128, kBlock = 16;
  for (auto kind : {CompressionPolicyKind::kTriAttention, CompressionPolicyKind::kStreamingLlm,
                    CompressionPolicyKind::kSnapKv, CompressionPolicyKind::kH2O}) {
    Recorder rec;
    config::Config cfg;
    cfg.cache.kv_bytes = 64ull << 20;
    cfg.compression.divide_length = kSlack;
    auto engine = Make(cfg, &rec);
    ASSERT_NE(engine, nullptr);
    RequestSpec s = Spec("long", Prompt(16, 3), 1024);
    s.compression.policy = kind;
    s.compression.budget = kBudget;
    const Outcome o = Run(*engine, s);
    const std::string what(config::Name(kind));
    ASSERT_EQ(o.tokens.size(), 1024u) << what << " " << o.error;
    ASSERT_TRUE(o.usage.has_value());
    const auto& c = o.usage->compression;
    EXPECT_EQ(c.policy, what);
    EXPECT_LE(rec.max_physical.load(), kBudget + kSlack + kBlock) << what;
    EXPECT_LE(c.peak_kv_tokens, kBudget + kSlack + kBlock) << what;
    EXPECT_GE(c.compression_ratio, 4.0) << what;
    EXPECT_GT(c.rounds, 0) << what;
    // Tokens seen = prompt + 1023 generated tokens whose KV was written. A position counts
    // as evicted once no (layer, KV head) row holds it any more; per-head policies keep
    // different tokens in different heads, so only streamingllm (one set for all heads)
    // evicts exactly everything but the last round's target and tail.
    if (kind == CompressionPolicyKind::kStreamingLlm) {
      EXPECT_GE(c.evicted_tokens, 16 + 1023 - (kBudget + kSlack)) << what;
    } else {
      EXPECT_GE(c.evicted_tokens, (16 + 1023 - (kBudget + kSlack)) / 2) << what;
    }
    EXPECT_EQ(c.evicted_prompt_tokens, 0) << what << ": the prompt is protected by default";
    int64_t evicted = 0;
    {
      std::lock_guard<std::mutex> lock(rec.mu);
      EXPECT_EQ(static_cast<int64_t>(rec.rounds.size()), c.rounds) << what;
      for (const auto& r : rec.rounds) {
        evicted += r.evicted_tokens;
        EXPECT_EQ(r.labels.policy, what);
        EXPECT_EQ(r.evicted_relative_positions.size(), static_cast<size_t>(r.evicted_tokens));
        for (double p : r.evicted_relative_positions) EXPECT_TRUE(p >= 0.0 && p < 1.0) << p;
        for (int64_t a : r.evicted_ages) EXPECT_GT(a, 0);
        EXPECT_GT(r.blocks_reclaimed, 0);
      }
    }
    EXPECT_EQ(evicted, c.evicted_tokens) << what;
    ExpectNoLeaks(engine, rec);
  }
}

TEST_F(CompressionEngine, AuditRecordNamesExactlyTheEvictedTokens) {
  Recorder rec;
  config::Config cfg;
  cfg.cache.kv_bytes = 64ull << 20;
  auto engine = Make(cfg, &rec);
  ASSERT_NE(engine, nullptr);
  RequestSpec s = Spec("audit", Prompt(200, 5), 200);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.budget = 96;
  s.compression.divide_length = 32;
  s.compression.protect_prompt = false;
  s.compression.audit = true;
  const Outcome o = Run(*engine, s);
  ASSERT_EQ(o.tokens.size(), 200u) << o.error;
  const auto& c = o.usage->compression;
  ASSERT_GT(c.rounds, 0);
  ASSERT_EQ(static_cast<int64_t>(c.audit.size()), c.rounds);
  std::vector<int32_t> all = s.prompt_tokens;
  all.insert(all.end(), o.tokens.begin(), o.tokens.end());
  std::vector<char> seen(all.size(), 0);
  int64_t total = 0, prompt_evicted = 0;
  for (size_t i = 0; i < c.audit.size(); ++i) {
    const EvictionRecord& r = c.audit[i];
    EXPECT_EQ(r.round, static_cast<int>(i) + 1);
    EXPECT_TRUE(std::is_sorted(r.positions.begin(), r.positions.end()));
    std::vector<int32_t> ids;
    for (int64_t p : r.positions) {
      ASSERT_LT(p, r.at_token);
      EXPECT_FALSE(seen[p]) << "position " << p << " reported twice";
      seen[p] = 1;
      ids.push_back(all[p]);
      if (p < 200) ++prompt_evicted;
    }
    EXPECT_EQ(r.token_ids_hash, HashTokenIds(ids));
    total += static_cast<int64_t>(r.positions.size());
  }
  EXPECT_EQ(total, c.evicted_tokens);
  EXPECT_EQ(prompt_evicted, c.evicted_prompt_tokens);
  EXPECT_GT(prompt_evicted, 0) << "an unprotected 200-token prompt over a 96-token budget loses prompt tokens";
  // Without audit the summary is the same and the record absent.
  RequestSpec quiet = s;
  quiet.request_id = "quiet";
  quiet.compression.audit = false;
  const Outcome q = Run(*engine, quiet);
  EXPECT_EQ(q.tokens, o.tokens);
  EXPECT_TRUE(q.usage->compression.audit.empty());
  EXPECT_EQ(q.usage->compression.evicted_tokens, c.evicted_tokens);
  ExpectNoLeaks(engine, rec);
}

TEST_F(CompressionEngine, BadSettingsAreRefusedNamingTheField) {
  Recorder rec;
  config::Config cfg;
  cfg.cache.kv_bytes = 16ull << 20;
  config::TenantConfig strict;
  strict.name = "strict";
  strict.allowed_policies = {CompressionPolicyKind::kFull};
  cfg.tenants.push_back(strict);
  auto engine = Make(cfg, &rec);
  ASSERT_NE(engine, nullptr);
  auto expect = [&](RequestSpec s, absl::StatusCode code, const std::string& text) {
    auto st = engine->Submit(std::move(s));
    ASSERT_FALSE(st.ok()) << text;
    EXPECT_EQ(st.status().code(), code) << st.status();
    EXPECT_THAT(std::string(st.status().message()), ::testing::HasSubstr(text));
  };
  RequestSpec s = Spec("bad", Prompt(100, 1), 8);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.budget = 64;  // the protected 100-token prompt leaves nothing to evict
  expect(s, absl::StatusCode::kInvalidArgument, "kv_compression.budget");
  s.compression.budget = 200;
  s.compression.ratio = 0.5;
  expect(s, absl::StatusCode::kInvalidArgument, "either budget or ratio");
  s.compression.ratio.reset();
  s.compression.protect_prompt = false;
  s.n = 2;
  expect(s, absl::StatusCode::kInvalidArgument, "kv_compression.protect_prompt");
  s.n = 1;
  s.tenant = "strict";
  expect(s, absl::StatusCode::kPermissionDenied, "may not use policy 'triattention'");
  // A valid one still runs afterwards, and ratio sets the budget from the request's size.
  RequestSpec ok = Spec("ok", Prompt(40, 2), 88);
  ok.compression.policy = CompressionPolicyKind::kTriAttention;
  ok.compression.ratio = 0.5;  // budget = 64 of 128 tokens
  ok.compression.divide_length = 16;
  const Outcome o = Run(*engine, ok);
  EXPECT_EQ(o.tokens.size(), 88u) << o.error;
  EXPECT_EQ(o.usage->compression.budget, 64);
  EXPECT_GT(o.usage->compression.rounds, 0);
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(rec.rejections, (std::vector<std::string>{
                                  "default/triattention:invalid_argument", "default/triattention:invalid_argument",
                                  "default/triattention:invalid_argument", "strict/triattention:permission_denied"}));
  }
  ExpectNoLeaks(engine, rec);
}

TEST_F(CompressionEngine, AutoCompressesOnlyAboveTheWatermark) {
  // Never under pressure: auto is exactly full.
  {
    Recorder rec;
    config::Config cfg;
    cfg.cache.kv_bytes = 64ull << 20;
    auto engine = Make(cfg, &rec);
    ASSERT_NE(engine, nullptr);
    RequestSpec s = Spec("a", Prompt(32, 9), 300);
    s.compression.policy = CompressionPolicyKind::kAuto;
    s.compression.budget = 64;
    s.compression.divide_length = 16;
    const Outcome a = Run(*engine, s);
    EXPECT_EQ(a.usage->compression.policy, "auto");
    EXPECT_EQ(a.usage->compression.rounds, 0) << "a 64 MiB pool is never above 90%";
    RequestSpec f = s;
    f.request_id = "f";
    f.compression.policy = CompressionPolicyKind::kFull;
    EXPECT_EQ(Run(*engine, f).tokens, a.tokens);
    ExpectNoLeaks(engine, rec);
  }
  // A pool of 40 blocks with watermarks 0.5 / 0.3: four 332-token requests cannot all fit
  // uncompressed, so auto rounds start once usage crosses half the pool.
  {
    Recorder rec;
    config::Config cfg;
    cfg.cache.kv_bytes = 40 * bytes_per_block_;
    cfg.cache.host_swap_bytes = 0;
    cfg.compression.auto_high_watermark = 0.5;
    cfg.compression.auto_low_watermark = 0.3;
    auto engine = Make(cfg, &rec);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 4; ++i) {
      RequestSpec s = Spec("auto" + std::to_string(i), Prompt(32, i), 300);
      s.compression.policy = CompressionPolicyKind::kAuto;
      s.compression.budget = 64;
      s.compression.divide_length = 16;
      auto st = engine->Submit(s);
      ASSERT_TRUE(st.ok()) << st.status();
      streams.push_back(*st);
    }
    int64_t rounds = 0;
    for (auto& st : streams) {
      Outcome o = Collect(*st);
      EXPECT_EQ(o.tokens.size(), 300u) << o.error;
      rounds += o.usage->compression.rounds;
    }
    EXPECT_GT(rounds, 0) << "pool pressure should have switched auto compression on";
    ExpectNoLeaks(engine, rec);
  }
}

TEST_F(CompressionEngine, PreemptedCompressingRequestsResumeAndStayBounded) {
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    Recorder rec;
    config::Config cfg;
    cfg.scheduler.preemption_mode = mode;
    cfg.cache.kv_bytes = 24 * bytes_per_block_;  // 384 tokens: two bounded requests, not six
    cfg.cache.host_swap_bytes = 128 * bytes_per_block_;
    cfg.compression.max_prefill_chunk = 32;
    auto engine = Make(cfg, &rec);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 6; ++i) {
      RequestSpec s = Spec("p" + std::to_string(i), Prompt(24, i), 240, 0.7f);
      s.n = i == 0 ? 2 : 1;  // forked samples share the protected prompt
      s.compression.policy = i % 2 ? CompressionPolicyKind::kTriAttention : CompressionPolicyKind::kH2O;
      s.compression.budget = 80;
      s.compression.divide_length = 32;
      auto st = engine->Submit(s);
      ASSERT_TRUE(st.ok()) << st.status();
      streams.push_back(*st);
    }
    for (auto& st : streams) {
      Outcome o = Collect(*st);
      EXPECT_EQ(o.tokens.size(), 240u) << o.error;
      EXPECT_EQ(o.finish, FinishReason::kLength);
      EXPECT_LE(o.usage->compression.peak_kv_tokens, 80 + 32 + 32 + 16);
    }
    EXPECT_GT(rec.preemptions.load(), 0) << "the pool was meant to force preemption";
    ExpectNoLeaks(engine, rec);
  }
}

// Importance-aware mixed precision (issue 18): a triattention request with a demote schedule
// keeps `budget` tokens exact and the next ones in int8 / int4 tier blocks. Its peak KV bytes
// are the plain request's plus exactly its granted tier blocks at their own block size, below
// what holding as many tokens at full precision costs; it decodes exactly as the full KV until
// its first round and stays a sane greedy continuation after; nothing leaks, also under
// preemption (a demoting sequence is recomputed, never swapped).
TEST_F(CompressionEngine, DemotionHoldsTokensInCheaperTiersAndLeaksNothing) {
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok());
  cache::KvLayout pool;
  pool.num_layers = mc->num_layers;
  pool.num_kv_heads = mc->num_kv_heads;
  pool.head_dim = mc->head_dim;
  pool.block_size = 16;
  const int64_t int8_block = static_cast<int64_t>(cache::DemoteTierLayout(pool, config::KvDtype::kInt8).bytes_per_block());
  const int64_t int4_block = static_cast<int64_t>(cache::DemoteTierLayout(pool, config::KvDtype::kInt4).bytes_per_block());
  ASSERT_LT(int4_block, int8_block);

  Recorder rec;
  auto engine = Make(DemotingConfig(), &rec);
  ASSERT_NE(engine, nullptr);
  const RequestSpec plain = Spec("full", Prompt(16, 9), 320);
  const Outcome full = Run(*engine, plain);
  ASSERT_EQ(full.tokens.size(), 320u) << full.error;

  const RequestSpec evict = Evicting(plain);
  RequestSpec demote = evict;
  demote.request_id = "demote";
  demote.compression.demote = {{config::KvDtype::kInt8, 64}, {config::KvDtype::kInt4, 128}};
  RequestSpec wide = evict;  // as many tokens as budget + tiers, all at full precision
  wide.request_id = "wide";
  wide.compression.budget = 64 + 64 + 128;
  const Outcome e = Run(*engine, evict), d = Run(*engine, demote), w = Run(*engine, wide);
  ASSERT_EQ(d.tokens.size(), 320u) << d.error;
  ASSERT_TRUE(e.usage && d.usage && w.usage);
  const CompressionSummary &ce = e.usage->compression, &cd = d.usage->compression, &cw = w.usage->compression;
  EXPECT_GT(cd.rounds, 0);
  EXPECT_GT(cd.demoted_tokens, 0);
  EXPECT_EQ(ce.demoted_tokens, 0);
  // Same full-precision footprint as the eviction-only request, plus the granted tier blocks.
  EXPECT_EQ(cd.peak_kv_tokens, ce.peak_kv_tokens);
  EXPECT_EQ(cd.peak_kv_bytes, ce.peak_kv_bytes + 4 * int8_block + 8 * int4_block);
  EXPECT_LT(cd.peak_kv_bytes, cw.peak_kv_bytes);
  EXPECT_GT(cd.kv_bytes_per_token, ce.kv_bytes_per_token);
  EXPECT_LT(cd.kv_bytes_per_token, cw.kv_bytes_per_token);
  // Demoted tokens are still attended: fewer evicted than with eviction alone.
  EXPECT_LT(cd.evicted_tokens, ce.evicted_tokens);
  // Until the first round (96 slots held) nothing differs; after it the greedy output stays
  // the model's own continuation, at least as close to the full KV as eviction alone is.
  auto agree = [&](const Outcome& o) {
    size_t n = 0;
    while (n < o.tokens.size() && o.tokens[n] == full.tokens[n]) ++n;
    return n;
  };
  EXPECT_GE(agree(d), 96u - 16u);
  EXPECT_GE(agree(d), std::min(agree(e), agree(w)));
  for (int32_t t : d.tokens) EXPECT_TRUE(t >= 0 && t < mc->vocab_size);
  EXPECT_EQ(rec.max_demote_used.load(), 12);

  // A demote schedule with nothing to evict changes nothing: bit-identical to full.
  RequestSpec roomy = demote;
  roomy.request_id = "roomy";
  roomy.compression.budget = 400;
  const Outcome r = Run(*engine, roomy);
  EXPECT_EQ(r.tokens, full.tokens);
  EXPECT_EQ(r.usage->compression.rounds, 0);

  // Refusals name the field.
  RequestSpec bad = demote;
  bad.compression.demote = {{config::KvDtype::kFp8E4M3, 64}};
  auto st = engine->Submit(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("kv_compression.demote.fp8_e4m3"), std::string_view::npos) << st.status();
  bad.compression.demote = {{config::KvDtype::kInt8, -1}};
  st = engine->Submit(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("kv_compression.demote.int8"), std::string_view::npos) << st.status();
  bad.compression.demote = {{config::KvDtype::kInt8, 64}};
  bad.compression.policy = CompressionPolicyKind::kH2O;
  st = engine->Submit(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("kv_compression.demote"), std::string_view::npos) << st.status();
  ExpectNoLeaks(engine, rec);
}

// Low-rank keys (issue 18) served end to end: a server with a low-rank key tier (the bundled
// model's key_basis.bin) holds "lowrank" tokens in it, pays exactly its granted blocks at the
// tier's own block size, attends them (fewer evictions than eviction alone), decodes exactly
// as full KV until the first round, refuses the tier where it is off, and leaks nothing.
TEST_F(CompressionEngine, LowRankKeyTierIsServedPerRequestAndLeaksNothing) {
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/key_basis.bin"));
  auto mc = model::LoadModelConfig(dir_);
  ASSERT_TRUE(mc.ok());
  cache::KvLayout pool;
  pool.num_layers = mc->num_layers;
  pool.num_kv_heads = mc->num_kv_heads;
  pool.head_dim = mc->head_dim;
  pool.block_size = 16;
  const int64_t lowrank_block = static_cast<int64_t>(
      cache::LowRankTierLayout(pool, 24, config::KvDtype::kBf16, config::KvDtype::kInt8).bytes_per_block());

  Recorder rec;
  config::Config cfg = DemotingConfig();
  cfg.cache.demote_dtypes = {config::KvDtype::kInt8};
  cfg.cache.lowrank_key_rank = 24;
  auto engine = Make(cfg, &rec);
  ASSERT_NE(engine, nullptr);
  const RequestSpec plain = Spec("full", Prompt(16, 9), 320);
  const Outcome full = Run(*engine, plain);
  ASSERT_EQ(full.tokens.size(), 320u) << full.error;
  const RequestSpec evict = Evicting(plain);
  RequestSpec low = evict;
  low.request_id = "lowrank";
  low.compression.demote_lowrank = 128;
  const Outcome e = Run(*engine, evict), d = Run(*engine, low);
  ASSERT_EQ(d.tokens.size(), 320u) << d.error;
  ASSERT_TRUE(e.usage && d.usage);
  const CompressionSummary &ce = e.usage->compression, &cd = d.usage->compression;
  EXPECT_GT(cd.demoted_tokens, 0);
  EXPECT_EQ(cd.peak_kv_tokens, ce.peak_kv_tokens);
  EXPECT_EQ(cd.peak_kv_bytes, ce.peak_kv_bytes + 8 * lowrank_block);
  EXPECT_LT(cd.evicted_tokens, ce.evicted_tokens);
  size_t agree = 0;
  while (agree < d.tokens.size() && d.tokens[agree] == full.tokens[agree]) ++agree;
  EXPECT_GE(agree, 96u - 16u);
  for (int32_t t : d.tokens) EXPECT_TRUE(t >= 0 && t < mc->vocab_size);
  EXPECT_EQ(rec.max_demote_used.load(), 8);
  // The bytes-per-token metric sees both tiers, the low-rank keys by rank.
  EXPECT_EQ(rec.tier_labels, (std::vector<std::string>{"int8/int8", "bf16_rank24/int8"}));
  ExpectNoLeaks(engine, rec);

  // A server without the tier refuses "lowrank" naming it.
  Recorder rec2;
  cfg.cache.lowrank_key_rank = 0;
  auto plain_engine = Make(cfg, &rec2);
  ASSERT_NE(plain_engine, nullptr);
  auto st = plain_engine->Submit(low);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("kv_compression.demote.lowrank"), std::string_view::npos) << st.status();
  EXPECT_EQ(Run(*plain_engine, Spec("short", Prompt(8, 1), 4)).tokens.size(), 4u);
  ExpectNoLeaks(plain_engine, rec2);
}

TEST_F(CompressionEngine, PreemptedDemotingRequestsAreRecomputedAndLeakNothing) {
  for (auto mode : {config::PreemptionMode::kRecompute, config::PreemptionMode::kSwap}) {
    Recorder rec;
    config::Config cfg;
    cfg.scheduler.preemption_mode = mode;
    cfg.cache.kv_bytes = 24 * bytes_per_block_ + (1ull << 20);
    cfg.cache.demote_kv_bytes = 1ull << 20;
    cfg.cache.host_swap_bytes = 128 * bytes_per_block_;
    cfg.compression.max_prefill_chunk = 32;
    auto engine = Make(cfg, &rec);
    ASSERT_NE(engine, nullptr);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 5; ++i) {
      RequestSpec s = Spec("p" + std::to_string(i), Prompt(24, i), 200, 0.7f);
      s.n = i == 0 ? 2 : 1;
      s.compression.policy = CompressionPolicyKind::kTriAttention;
      s.compression.budget = 80;
      s.compression.divide_length = 32;
      s.compression.demote = {{config::KvDtype::kInt8, 32}, {config::KvDtype::kInt4, 64}};
      auto st = engine->Submit(s);
      ASSERT_TRUE(st.ok()) << st.status();
      streams.push_back(*st);
    }
    for (auto& st : streams) {
      Outcome o = Collect(*st);
      EXPECT_EQ(o.tokens.size(), 200u) << o.error;
      EXPECT_EQ(o.finish, FinishReason::kLength);
    }
    EXPECT_GT(rec.preemptions.load(), 0) << "the pool was meant to force preemption";
    EXPECT_GT(rec.max_demote_used.load(), 0);
    ExpectNoLeaks(engine, rec);
  }
}

}  // namespace
}  // namespace kvserve::engine
