// LoRA adapters served end to end: the engine on a random Llama checkpoint written at test
// time, PEFT adapters written next to it, and the real ServerApp on 127.0.0.1 (ephemeral
// ports) in front of it. Checked: a batch mixing the base and four adapters of different
// ranks (2, 4, 8, 16) gives every request the tokens and logprobs it gets alone, bit for bit
// (greedy); the max_loras bound; prefix-cache isolation by adapter digest (a reload under the same
// name never hits the old blocks); the 404s (unknown, and another tenant's adapter, with the
// same body); refusals by name at start-up and at the admin call; load and unload under
// traffic; /v1/models; the metrics; an adapter selected over gRPC.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine_factory.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "server/core/wall_clock.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/server_app.h"
#include "tests/support/hf_models/presets.h"
#include "tests/unit/lora/lora_test_util.h"
#include "tests/unit/server/fake_text_codec.h"
#include "tests/unit/server/http_test_client.h"

namespace kvserve::lora::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The base checkpoint and adapter directories, written once per process.
struct Dirs {
  std::string base, a1, a2, a3, a5, a1v2, too_big_rank, no_such_module;
};

std::string WriteDir(const std::string& name) {
  const fs::path p = fs::path(TestRoot()) / "serve" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// One adapter over every layer: `modules` are suffixes such as "self_attn.q_proj".
void WriteLlamaAdapter(const std::string& dir, const model::ModelConfig& c, int r, double alpha,
                       const std::vector<std::string>& modules, uint64_t seed) {
  std::map<std::string, ModuleWeights> m;
  for (int l = 0; l < c.num_layers; ++l) {
    for (const std::string& mod : modules) {
      int in = c.hidden_size, out = c.hidden_size;
      if (mod == "self_attn.q_proj") out = c.q_size();
      if (mod == "self_attn.k_proj" || mod == "self_attn.v_proj") out = c.kv_size();
      if (mod == "self_attn.o_proj") in = c.q_size();
      if (mod == "mlp.gate_proj" || mod == "mlp.up_proj") out = c.intermediate_size;
      if (mod == "mlp.down_proj") in = c.intermediate_size;
      if (mod == "self_attn.nonexistent_proj") out = c.hidden_size;
      m["model.layers." + std::to_string(l) + "." + mod] =
          RandomModule(r, in, out, seed * 1000 + static_cast<uint64_t>(l) * 10 + m.size());
    }
  }
  WriteAdapter(dir, LoraConfigJson(r, alpha), m);
}

const Dirs& Fixture() {
  static const Dirs* dirs = [] {
    auto* d = new Dirs;
    const auto spec = hf::LlamaPreset();
    d->base = WriteDir("base");
    EXPECT_TRUE(hf::WriteRandomCheckpoint(spec, d->base).ok());
    const model::ModelConfig c = ConfigOf(spec);
    d->a1 = WriteDir("a1");
    WriteLlamaAdapter(d->a1, c, 8, 16, {"self_attn.q_proj", "self_attn.v_proj"}, 1);
    d->a2 = WriteDir("a2");
    WriteLlamaAdapter(d->a2, c, 4, 8,
                      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                       "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"},
                      2);
    d->a3 = WriteDir("a3");
    WriteLlamaAdapter(d->a3, c, 16, 32, {"self_attn.o_proj", "mlp.down_proj"}, 3);
    d->a5 = WriteDir("a5");
    WriteLlamaAdapter(d->a5, c, 2, 4, {"self_attn.k_proj", "mlp.gate_proj"}, 7);
    d->a1v2 = WriteDir("a1v2");
    WriteLlamaAdapter(d->a1v2, c, 8, 16, {"self_attn.q_proj", "self_attn.v_proj"}, 4);
    d->too_big_rank = WriteDir("too_big_rank");
    WriteLlamaAdapter(d->too_big_rank, c, 32, 32, {"self_attn.q_proj"}, 5);
    d->no_such_module = WriteDir("no_such_module");
    WriteLlamaAdapter(d->no_such_module, c, 4, 4, {"self_attn.nonexistent_proj"}, 6);
    return d;
  }();
  return *dirs;
}

constexpr char kBase[] = "base-model";

config::Config Config(int max_loras = 4) {
  const Dirs& d = Fixture();
  config::Config c;
  c.engine.threads = 1;
  c.engine.backend = config::Backend::kCpu;
  c.cache.kv_bytes = 16ull << 20;
  c.model.served_name = kBase;
  c.lora.max_loras = max_loras;
  c.lora.adapters = {"a1=" + d.a1, "a2=" + d.a2, "a3=" + d.a3, "a5=" + d.a5};
  return c;
}

// Holds the engine at its first step until released (so every request submitted meanwhile
// runs in one batch), and keeps the largest number of running adapters it was told of.
class Gate : public engine::EngineObserver {
 public:
  void Hold() { held_ = true; }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  void OnStep(const engine::StepStats& s) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !held_; });
    max_batch = std::max(max_batch.load(), s.num_seqs);
  }
  void OnLoraState(const engine::LoraState& s) override {
    max_running_adapters =
        std::max(max_running_adapters.load(), static_cast<int>(s.running.size()));
    max_lora = s.max_lora;
  }
  std::atomic<int> max_batch{0};
  std::atomic<int> max_running_adapters{0};
  std::atomic<int> max_lora{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

std::unique_ptr<engine::ServingEngine> MakeEngine(const config::Config& c,
                                                  engine::EngineObserver* obs) {
  engine::EngineDeps deps;
  deps.observer = obs;
  auto e = engine::CreateEngine(c, Fixture().base, std::move(deps));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < len; ++i) p.push_back(3 + (i * 37 + salt * 101) % 250);
  return p;
}

engine::RequestSpec Greedy(const std::string& id, const std::string& adapter,
                           std::vector<int32_t> prompt, int max_tokens = 12) {
  engine::RequestSpec s;
  s.request_id = id;
  s.lora = adapter;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0.0f;
  s.sampling.logprobs = 1;
  return s;
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t cached_prompt_tokens = -1;
  int64_t draft_tokens = 0;    // speculation: guesses verified
  int64_t evicted_tokens = 0;  // compression
  bool operator==(const Output& o) const { return tokens == o.tokens && logprobs == o.logprobs; }
};

Output Collect(engine::TokenStream& stream) {
  Output out;
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(200));
    if (!e) continue;
    out.tokens.insert(out.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    for (const auto& lp : e->logprobs) out.logprobs.push_back(lp.logprob);
    if (e->usage) {
      out.cached_prompt_tokens = e->usage->cached_prompt_tokens;
      out.draft_tokens = e->usage->spec_draft_tokens;
      out.evicted_tokens = e->usage->compression.evicted_tokens;
    }
  }
  return out;
}

Output RunOne(engine::ServingEngine& e, engine::RequestSpec spec) {
  auto s = e.Submit(std::move(spec));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? Collect(**s) : Output{};
}

const std::vector<std::string> kModels = {"", "a1", "a2", "a3", "a5"};

TEST(LoraServe, MixedBatchOfBaseAndFourAdaptersIsBitForBitEachAlone) {
  // Alone: one engine per request, so nothing is shared, not even the prefix cache.
  std::vector<Output> alone;
  for (size_t i = 0; i < kModels.size(); ++i) {
    auto e = MakeEngine(Config(), nullptr);
    ASSERT_NE(e, nullptr);
    alone.push_back(RunOne(*e, Greedy("alone" + std::to_string(i), kModels[i],
                                      Prompt(20 + 3 * static_cast<int>(i), 7))));
    ASSERT_EQ(alone.back().tokens.size(), 12u);
  }
  // Each adapter changes what the base computes.
  for (size_t i = 1; i < alone.size(); ++i)
    EXPECT_NE(alone[i].logprobs, alone[0].logprobs) << kModels[i];

  // Together, twice each, in one batch.
  Gate gate;
  gate.Hold();
  auto e = MakeEngine(Config(), &gate);
  ASSERT_NE(e, nullptr);
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kModels.size(); ++i) {
      auto s = e->Submit(Greedy("r" + std::to_string(round) + "_" + std::to_string(i), kModels[i],
                                Prompt(20 + 3 * static_cast<int>(i), 7)));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
  }
  gate.Release();
  for (size_t k = 0; k < streams.size(); ++k) {
    EXPECT_EQ(Collect(*streams[k]), alone[k % kModels.size()])
        << "request " << k << " on '" << kModels[k % kModels.size()] << "'";
  }
  EXPECT_GE(gate.max_batch.load(), 4) << "the requests never shared a step";
  EXPECT_EQ(gate.max_running_adapters.load(), 4);
  EXPECT_EQ(gate.max_lora.load(), 4);
}

// An adapter under the other per-request features: n-gram speculation verifies drafts with the
// adapter's deltas on every verify row (its output equals the same adapter without speculation,
// bit for bit), and a compression policy evicts on the adapter's KV (and still runs the adapter).
TEST(LoraServe, AdapterComposesWithSpeculationAndCompression) {
  config::Config c = Config();
  c.speculative.row_cost = 0.05;  // fixed: the measured cost model might not draft on this VM
  auto e = MakeEngine(c, nullptr);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> prompt{1};
  for (int r = 0; r < 6; ++r)
    for (int t : {40, 41, 42, 43, 44}) prompt.push_back(t);  // copy-heavy: drafts to verify
  const Output plain = RunOne(*e, Greedy("plain", "a2", prompt, 24));
  engine::RequestSpec spec = Greedy("spec", "a2", prompt, 24);
  spec.speculative.method = config::SpeculativeMethod::kNgram;
  spec.speculative.num_tokens = 3;
  spec.speculative.ngram_min = 1;
  spec.speculative.ngram_max = 3;
  const Output drafted = RunOne(*e, spec);
  EXPECT_EQ(drafted, plain);
  EXPECT_GT(drafted.draft_tokens, 0);
  EXPECT_EQ(plain.draft_tokens, 0);

  auto compressed = [&](const std::string& id, const std::string& adapter) {
    engine::RequestSpec s = Greedy(id, adapter, Prompt(30, 3), 24);
    s.compression.policy = config::CompressionPolicyKind::kStreamingLlm;
    s.compression.budget = 16;
    s.compression.protect_prompt = false;
    return RunOne(*e, s);
  };
  const Output with = compressed("c1", "a2"), base = compressed("c0", "");
  ASSERT_EQ(with.tokens.size(), 24u);
  EXPECT_GT(with.evicted_tokens, 0);
  EXPECT_EQ(with.evicted_tokens, base.evicted_tokens);  // the policy sees positions, not weights
  EXPECT_NE(with.logprobs, base.logprobs);              // and the adapter still applies
}

TEST(LoraServe, SchedulerRunsAtMostMaxLorasAdaptersAtOnce) {
  std::vector<Output> alone;
  {
    auto e = MakeEngine(Config(), nullptr);
    ASSERT_NE(e, nullptr);
    for (size_t i = 0; i < kModels.size(); ++i) {
      alone.push_back(RunOne(
          *e, Greedy("a" + std::to_string(i), kModels[i], Prompt(18, 11 + static_cast<int>(i)))));
    }
  }
  Gate gate;
  gate.Hold();
  auto e = MakeEngine(Config(/*max_loras=*/1), &gate);
  ASSERT_NE(e, nullptr);
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (size_t i = 0; i < kModels.size(); ++i) {
    auto s = e->Submit(
        Greedy("m" + std::to_string(i), kModels[i], Prompt(18, 11 + static_cast<int>(i))));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  gate.Release();
  for (size_t i = 0; i < streams.size(); ++i)
    EXPECT_EQ(Collect(*streams[i]), alone[i]) << kModels[i];
  EXPECT_EQ(gate.max_running_adapters.load(), 1) << "more adapters ran at once than lora.max_loras";
}

TEST(LoraServe, PrefixCacheKeysOnTheAdaptersWeightsNotItsName) {
  auto e = MakeEngine(Config(), nullptr);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> p = Prompt(50, 3);  // three full 16-token blocks
  const Output first = RunOne(*e, Greedy("1", "a1", p));
  EXPECT_EQ(first.cached_prompt_tokens, 0);
  const Output again = RunOne(*e, Greedy("2", "a1", p));
  EXPECT_GE(again.cached_prompt_tokens, 32) << "the same adapter shares its own prefix";
  EXPECT_EQ(again, first);
  EXPECT_EQ(RunOne(*e, Greedy("3", "a2", p)).cached_prompt_tokens, 0) << "another adapter's KV";
  EXPECT_EQ(RunOne(*e, Greedy("4", "", p)).cached_prompt_tokens, 0)
      << "the base read an adapter's KV";
  EXPECT_GE(RunOne(*e, Greedy("5", "", p)).cached_prompt_tokens, 32);

  // Reloaded under the same name with new weights: never the old blocks.
  ASSERT_TRUE(e->UnloadAdapter("a1").ok());
  EXPECT_FALSE(e->HasAdapter("a1"));
  ASSERT_TRUE(e->LoadAdapter("a1", Fixture().a1v2).ok());
  const Output reloaded = RunOne(*e, Greedy("6", "a1", p));
  EXPECT_EQ(reloaded.cached_prompt_tokens, 0);
  EXPECT_NE(reloaded.logprobs, first.logprobs);
}

TEST(LoraServe, BadAdaptersAreRefusedByNameAtStartAndAtLoad) {
  config::Config c = Config();
  c.lora.adapters.push_back("big=" + Fixture().too_big_rank);
  engine::EngineDeps deps;
  auto e = engine::CreateEngine(c, Fixture().base, std::move(deps));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("big"), std::string::npos) << e.status();
  EXPECT_NE(std::string(e.status().message()).find("max_lora_rank"), std::string::npos)
      << e.status();

  auto ok = MakeEngine(Config(), nullptr);
  ASSERT_NE(ok, nullptr);
  absl::Status st = ok->LoadAdapter("odd", Fixture().no_such_module);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("nonexistent_proj"), std::string::npos) << st;
  st = ok->LoadAdapter("missing", Fixture().base + "/no_such_dir");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("adapter_config.json"), std::string::npos) << st;
  EXPECT_TRUE(absl::IsAlreadyExists(ok->LoadAdapter("a2", Fixture().a3)));
  // The engine refuses a name it does not know with the model 404's words.
  auto s = ok->Submit(Greedy("x", "nope", Prompt(8, 1)));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
}

// ---- over HTTP and gRPC

// The random model emits any byte; gRPC's string fields must be UTF-8. This codec shows
// token t as the letter 'a' + t % 26 (tokenizing as the byte-level fake does).
class LetterCodec final : public server::TextCodec {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool special) const override {
    return fake_.Encode(text, special);
  }
  std::string Decode(std::span<const int32_t> ids, bool) const override {
    std::string out;
    for (int32_t id : ids) out += Letter(id);
    return out;
  }
  std::string TokenText(int32_t id) const override { return std::string(1, Letter(id)); }
  std::unique_ptr<server::TextStreamDecoder> NewStreamDecoder(bool, bool) const override {
    struct Decoder final : server::TextStreamDecoder {
      void Push(int32_t id, std::string& out) override { out += Letter(id); }
      void Finish(std::string&) override {}
    };
    return std::make_unique<Decoder>();
  }
  absl::StatusOr<server::ChatPrompt> EncodeChat(
      std::span<const server::ChatMessage> messages,
      const server::ChatPromptOptions& options) const override {
    return fake_.EncodeChat(messages, options);
  }
  int32_t vocab_size() const override { return fake_.vocab_size(); }

 private:
  static char Letter(int32_t id) { return static_cast<char>('a' + (id % 26 + 26) % 26); }
  server::testing::FakeTextCodec fake_;
};

class LoraHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    server::PrometheusMetricsOptions mo;
    mo.model_name = kBase;
    metrics_ = std::make_unique<server::PrometheusMetrics>(mo);
    config::TenantConfig t1;
    t1.name = "t1";
    t1.api_keys = {"sk-1"};
    t1.adapters = {"a1"};
    config::TenantConfig t2;
    t2.name = "t2";
    t2.api_keys = {"sk-2"};
    config::Config c = Config();
    c.lora.admin_api_key = "sk-admin";
    c.tenants = {t1, t2};  // the engine schedules by tenant too
    engine_ = MakeEngine(c, metrics_.get());
    ASSERT_NE(engine_, nullptr);
    server::ServerAppOptions o;
    o.server.host = "127.0.0.1";
    o.server.http_port = 0;
    o.server.grpc_port = 0;
    o.tenants = c.tenants;
    o.model_name = kBase;
    o.lora = c.lora;
    o.version = "test";
    o.metrics_text = [this] { return metrics_->ExpositionText(); };
    server::ServerAppDeps deps;
    deps.engine = engine_.get();
    deps.codec = &codec_;
    deps.clock = &clock_;
    deps.wall_clock = &wall_clock_;
    app_ = std::make_unique<server::ServerApp>(std::move(o), std::move(deps));
    ASSERT_TRUE(app_->Start().ok());
  }
  void TearDown() override {
    if (app_) app_->Stop();
    app_.reset();
    engine_.reset();
  }

  httplib::Result Post(const std::string& path, const json& body, const std::string& key) {
    httplib::Client c("127.0.0.1", app_->http_port());
    c.set_read_timeout(60, 0);
    return c.Post(path, server::testing::BearerHeaders(key), body.dump(), "application/json");
  }
  httplib::Result Get(const std::string& path, const std::string& key) {
    httplib::Client c("127.0.0.1", app_->http_port());
    return c.Get(path, server::testing::BearerHeaders(key));
  }
  static json Completion(const std::string& model, int max_tokens = 8) {
    return {{"model", model},   {"prompt", Prompt(20, 5)}, {"max_tokens", max_tokens},
            {"temperature", 0}, {"ignore_eos", true},      {"logprobs", 1}};
  }
  // The completion's text, or the failure.
  std::string Text(const std::string& model, const std::string& key = "sk-2") {
    auto r = Post("/v1/completions", Completion(model), key);
    if (!r || r->status != 200) return "FAILED " + (r ? r->body : std::string("no response"));
    return json::parse(r->body)["choices"][0]["text"].get<std::string>();
  }

  base::SteadyClock clock_;
  server::WallClock wall_clock_;
  LetterCodec codec_;
  std::unique_ptr<server::PrometheusMetrics> metrics_;
  std::unique_ptr<engine::ServingEngine> engine_;
  std::unique_ptr<server::ServerApp> app_;
};

TEST_F(LoraHttp, ModelSelectsTheAdapterAndUnknownOrForeignAdaptersAre404Alike) {
  const std::string base = Text(kBase);
  const std::string a1 = Text("a1");
  ASSERT_EQ(base.rfind("FAILED", 0), std::string::npos) << base;
  ASSERT_EQ(a1.rfind("FAILED", 0), std::string::npos) << a1;
  EXPECT_EQ(Text(""), base);  // no model: the base
  auto lp = [&](const std::string& model) {
    return json::parse(Post("/v1/completions", Completion(model), "sk-2")
                           ->body)["choices"][0]["logprobs"]["token_logprobs"];
  };
  EXPECT_NE(lp("a1"), lp(kBase));
  EXPECT_EQ(Text("a1", "sk-1"), a1);  // t1 may use a1

  json unknown =
      server::testing::ExpectOpenAiError(Post("/v1/completions", Completion("zz"), "sk-1"), 404);
  EXPECT_EQ(unknown["code"], "model_not_found");
  EXPECT_EQ(unknown["type"], "not_found_error");
  // t1 may not use a2: exactly the unknown model's answer (only the name differs).
  json foreign =
      server::testing::ExpectOpenAiError(Post("/v1/completions", Completion("a2"), "sk-1"), 404);
  EXPECT_EQ(foreign["code"], unknown["code"]);
  EXPECT_EQ(foreign["type"], unknown["type"]);
  EXPECT_EQ(foreign["message"], "The model `a2` does not exist.");
  EXPECT_EQ(unknown["message"], "The model `zz` does not exist.");

  // /v1/models: the base, then the adapters the tenant may use, each with the base as parent.
  json all = json::parse(Get("/v1/models", "sk-2")->body)["data"];
  ASSERT_EQ(all.size(), 5u) << all.dump();
  EXPECT_EQ(all[0]["id"], kBase);
  EXPECT_TRUE(all[0]["parent"].is_null());
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(all[i]["id"], kModels[i]);
    EXPECT_EQ(all[i]["parent"], kBase);
  }
  json t1 = json::parse(Get("/v1/models", "sk-1")->body)["data"];
  ASSERT_EQ(t1.size(), 2u) << t1.dump();
  EXPECT_EQ(t1[1]["id"], "a1");
}

TEST_F(LoraHttp, AdminLoadsAndUnloadsAdaptersUnderTraffic) {
  const json load = {{"lora_name", "a4"}, {"lora_path", Fixture().a3}};
  server::testing::ExpectOpenAiError(Post("/v1/load_lora_adapter", load, "sk-2"),
                                     401);  // a tenant key
  json bad = server::testing::ExpectOpenAiError(
      Post("/v1/load_lora_adapter", {{"lora_name", "big"}, {"lora_path", Fixture().too_big_rank}},
           "sk-admin"),
      400);
  EXPECT_NE(bad["message"].get<std::string>().find("max_lora_rank"), std::string::npos)
      << bad.dump();
  server::testing::ExpectOpenAiError(
      Post("/v1/load_lora_adapter", {{"lora_name", "x"}}, "sk-admin"), 400);

  EXPECT_EQ(Text("a4").rfind("FAILED", 0), 0u);  // not there yet
  auto r = Post("/v1/load_lora_adapter", load, "sk-admin");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Text("a4"), Text("a3"));  // the same directory computes the same
  server::testing::ExpectOpenAiError(Post("/v1/load_lora_adapter", load, "sk-admin"),
                                     400);  // taken

  // Unload a2 while a long request runs on it: the request finishes whole.
  std::string long_text;
  std::thread traffic([&] {
    auto res = Post("/v1/completions", Completion("a2", 600), "sk-2");
    long_text = res ? res->body : "no response";
  });
  // Wait until the engine runs it (a2 among the running adapters of the gauge).
  bool seen_running = false;
  for (int i = 0; i < 2000 && !seen_running; ++i) {
    seen_running =
        metrics_->ExpositionText().find("running_lora_adapters=\"a2\"") != std::string::npos;
    if (!seen_running) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen_running) << "the long request on a2 never showed as running";
  r = Post("/v1/unload_lora_adapter", {{"lora_name", "a2"}}, "sk-admin");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(engine_->InFlight(), 1) << "the request on a2 ended before the unload";
  traffic.join();
  json done = json::parse(long_text, nullptr, false);
  ASSERT_TRUE(done.is_object()) << long_text;
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length") << long_text;
  EXPECT_EQ(done["usage"]["completion_tokens"], 600) << long_text;
  json gone =
      server::testing::ExpectOpenAiError(Post("/v1/completions", Completion("a2"), "sk-2"), 404);
  EXPECT_EQ(gone["code"], "model_not_found");
  server::testing::ExpectOpenAiError(
      Post("/v1/unload_lora_adapter", {{"lora_name", "a2"}}, "sk-admin"), 404);
}

TEST_F(LoraHttp, MetricsShowTheAdaptersAndGrpcSelectsThemByModel) {
  ASSERT_EQ(Text("a1").rfind("FAILED", 0), std::string::npos);
  ASSERT_EQ(Text("a3").rfind("FAILED", 0), std::string::npos);
  const std::string m = Get("/metrics", "")->body;
  EXPECT_NE(m.find("vllm:lora_requests_info{max_lora=\"4\""), std::string::npos) << m;
  EXPECT_NE(m.find("kvserve_lora_requests_total{model=\"base-model\",adapter=\"a1\"}"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("kvserve_lora_generation_tokens_total{model=\"base-model\",adapter=\"a3\"}"),
            std::string::npos)
      << m;

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::KvServe::NewStub(channel);
  auto generate = [&](const std::string& model, std::string* text) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer sk-2");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GenerateRequest req;
    req.set_model(model);
    for (int32_t t : Prompt(20, 5)) req.mutable_prompt_token_ids()->add_ids(t);
    req.mutable_sampling()->set_max_tokens(8);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_ignore_eos(true);
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateChunk c;
    while (reader->Read(&c)) *text += c.text();
    return reader->Finish();
  };
  std::string text;
  grpc::Status st = generate("a1", &text);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(text, Text("a1"));
  std::string none;
  EXPECT_EQ(generate("zz", &none).error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer sk-1");
  v1::ListModelsResponse models;
  ASSERT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(1).id(), "a1");
  EXPECT_EQ(models.models(1).parent(), kBase);
}

}  // namespace
}  // namespace kvserve::lora::testing
