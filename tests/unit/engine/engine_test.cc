#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/cache_invariants.h"
#include "tests/support/engine/fake_model_runner.h"

namespace kvserve::engine {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 500;

struct Rig {
  explicit Rig(config::Config cfg = {}, int32_t blocks = 256, int32_t host_blocks = 0,
               std::function<void(int64_t)> before_step = {})
      : config(std::move(cfg)) {
    cache::KvCacheManagerOptions co;
    co.layout.block_size = config.cache.block_size;
    co.num_blocks = blocks;
    co.num_host_blocks = host_blocks;
    co.enable_prefix_caching = config.cache.enable_prefix_caching;
    cache = std::make_unique<cache::KvCacheManager>(co, base::Logger());
    FakeModelRunnerOptions ro;
    ro.vocab_size = kVocab;
    ro.block_size = config.cache.block_size;
    ro.num_device_blocks = blocks;
    ro.num_host_blocks = host_blocks;
    ro.before_step = std::move(before_step);
    runner = std::make_unique<FakeModelRunner>(ro);
    ModelInfo info{"fake", 512, {kVocab - 1}, kVocab};
    engine = std::make_unique<Engine>(config, info, *cache, *runner, EngineDeps{});
    engine->Start();
  }

  config::Config config;
  std::unique_ptr<cache::KvCacheManager> cache;
  std::unique_ptr<FakeModelRunner> runner;
  std::unique_ptr<Engine> engine;
};

RequestSpec Spec(const std::string& id, int prompt_len, int max_tokens, uint64_t seed = 7) {
  RequestSpec s;
  s.request_id = id;
  for (int i = 0; i < prompt_len; ++i) s.prompt_tokens.push_back((i * 11 + 5) % (kVocab - 1));
  s.max_tokens = max_tokens;
  s.sampling.seed = seed;
  return s;
}

struct Collected {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> finish;
  std::optional<RequestUsage> usage;
  int events = 0;
};

Collected Drain(TokenStream& stream, int n = 1) {
  Collected c;
  c.tokens.resize(n);
  c.finish.resize(n, FinishReason::kError);
  while (!stream.done()) {
    auto e = stream.pop_wait(std::chrono::milliseconds(100));
    if (!e) continue;
    ++c.events;
    auto& t = c.tokens[e->sample_index];
    t.insert(t.end(), e->token_ids.begin(), e->token_ids.end());
    if (e->finish) c.finish[e->sample_index] = *e->finish;
    if (e->usage) c.usage = e->usage;
  }
  return c;
}

// For the end of every test whose requests have all ended (their streams are done): no KV
// block may still be referenced. Stop() first: it joins the engine thread, the cache's only
// writer, so reading the cache here is race-free; it frees nothing of a request that has
// already ended, so a block still used afterwards is a real leak.
void ExpectNoBlocksLeaked(Rig& rig) {
  rig.engine->Stop();
  EXPECT_EQ(rig.engine->InFlight(), 0);
  const absl::Status invariants = cache::CheckCacheInvariants(*rig.cache);
  EXPECT_TRUE(invariants.ok()) << invariants;
  const cache::CacheUsage usage = rig.cache->usage();
  EXPECT_EQ(usage.used_blocks, 0) << usage.ToString();
  EXPECT_EQ(usage.num_sequences, 0) << usage.ToString();
  EXPECT_EQ(usage.swap_used_blocks, 0) << usage.ToString();
}

// The fake model's tokens for a request: the chain of NextToken over the history.
std::vector<int32_t> Expected(const RequestSpec& s, int sample = 0) {
  std::vector<int32_t> history = s.prompt_tokens, out;
  uint64_t seed = *s.sampling.seed * 31 + static_cast<uint64_t>(sample);
  for (int i = 0; i < s.max_tokens; ++i) {
    int32_t t = FakeModelRunner::NextToken(history, seed, kVocab);
    out.push_back(t);
    history.push_back(t);
    if (t == kVocab - 1) break;  // EOS
  }
  return out;
}

TEST(Engine, ServesConcurrentRequestsFromManyThreads) {
  Rig rig;
  constexpr int kThreads = 8, kPerThread = 10;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        RequestSpec spec = Spec("r" + std::to_string(t) + "-" + std::to_string(i), 5 + (i * 7) % 30,
                                1 + (t + i) % 20, 100 + t * 31 + i);
        auto stream = rig.engine->Submit(spec);
        ASSERT_TRUE(stream.ok()) << stream.status();
        Collected c = Drain(**stream);
        EXPECT_EQ(c.tokens[0], Expected(spec)) << spec.request_id;
        ASSERT_TRUE(c.usage.has_value());
        EXPECT_EQ(c.usage->prompt_tokens, static_cast<int64_t>(spec.prompt_tokens.size()));
        EXPECT_EQ(c.usage->completion_tokens, static_cast<int64_t>(c.tokens[0].size()));
        ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  EXPECT_EQ(rig.engine->InFlight(), 0);
  ExpectNoBlocksLeaked(rig);
}

// Swap preemption with n = 2 requests in small pools through the engine: every sample's
// tokens are exact (the fake runner checks swapped-in KV at every step) and nothing leaks.
// Engine::Step runs any plan that moves KV even when it computes nothing (StepPlan::moves_kv).
TEST(Engine, SwapPreemptionWithParallelSamplesIsExact) {
  int64_t swap_in_only = 0;
  for (int32_t blocks : {8, 9, 10, 11, 12}) {
    for (int budget : {8, 16}) {
      for (int max_seqs : {2, 3}) {
        config::Config cfg;
        cfg.cache.block_size = 4;
        cfg.cache.enable_prefix_caching = false;
        cfg.scheduler.preemption_mode = config::PreemptionMode::kSwap;
        cfg.scheduler.max_num_batched_tokens = budget;
        cfg.scheduler.max_num_seqs = max_seqs;
        // Hold step 1 until every request is queued, so each run schedules the same way.
        std::mutex mu;
        std::condition_variable cv;
        bool all_in = false;
        Rig rig(cfg, blocks, /*host_blocks=*/32, [&](int64_t) {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return all_in; });
        });
        std::vector<RequestSpec> specs;
        std::vector<std::shared_ptr<TokenStream>> streams;
        for (int i = 0; i < 4; ++i) {
          specs.push_back(Spec("s" + std::to_string(i), 5 + (i * 3) % 7, 4 + (i * 5) % 9, 70 + i));
          specs.back().n = (i % 2 == 0) ? 2 : 1;
          auto st = rig.engine->Submit(specs.back());
          ASSERT_TRUE(st.ok()) << st.status();
          streams.push_back(*st);
        }
        {
          std::lock_guard lock(mu);
          all_in = true;
        }
        cv.notify_all();
        for (size_t i = 0; i < specs.size(); ++i) {
          Collected c = Drain(*streams[i], specs[i].n);
          for (int k = 0; k < specs[i].n; ++k) {
            EXPECT_EQ(c.tokens[k], Expected(specs[i], k)) << specs[i].request_id << " sample " << k;
          }
        }
        swap_in_only += rig.runner->swap_in_only_steps();
        ExpectNoBlocksLeaked(rig);
      }
    }
  }
  EXPECT_EQ(swap_in_only, 0);  // today's admission never swaps in alone (scheduler_test)
}

TEST(Engine, ParallelSamplesEachFinish) {
  Rig rig;
  RequestSpec spec = Spec("n3", 12, 8, 42);
  spec.n = 3;
  auto stream = rig.engine->Submit(spec);
  ASSERT_TRUE(stream.ok());
  Collected c = Drain(**stream, 3);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(c.tokens[k], Expected(spec, k)) << k;
  EXPECT_EQ(c.usage->completion_tokens,
            static_cast<int64_t>(c.tokens[0].size() + c.tokens[1].size() + c.tokens[2].size()));
  ExpectNoBlocksLeaked(rig);  // the forked samples share blocks copy-on-write
}

TEST(Engine, AConsumerWakesOncePerStepNotOncePerEvent) {
  // The engine waits before its first step until the listener is in place.
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::atomic<int> steps{0};
  Rig rig(config::Config{}, 256, 0, [&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return go; });
    steps.fetch_add(1);
  });
  std::atomic<int> wakes{0};
  RequestSpec spec = Spec("batched", 12, 6, 42);
  spec.n = 3;
  spec.ignore_eos = true;
  auto stream = rig.engine->Submit(spec);
  ASSERT_TRUE(stream.ok());
  (*stream)->set_listener([&wakes] { wakes.fetch_add(1); });
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  Collected c = Drain(**stream, 3);
  EXPECT_EQ(c.events, 18);  // 3 samples x 6 tokens, one event each
  for (int k = 0; k < 3; ++k) EXPECT_EQ(c.tokens[k].size(), 6u) << k;
  // Each step's events (every sample's token, the final ones, the close) come with a single
  // wake-up, not one per event.
  EXPECT_GE(wakes.load(), 1);
  EXPECT_LE(wakes.load(), steps.load());
  EXPECT_LT(wakes.load(), c.events / 2);
  ExpectNoBlocksLeaked(rig);
}

TEST(Engine, RejectsInvalidRequestsNamingTheField) {
  Rig rig;
  RequestSpec s = Spec("bad", 4, 4);
  s.max_tokens = 0;
  EXPECT_THAT(std::string(rig.engine->Submit(s).status().message()), HasSubstr("max_tokens"));
  s = Spec("bad", 4, 4);
  s.sampling.top_p = 0;
  EXPECT_THAT(std::string(rig.engine->Submit(s).status().message()), HasSubstr("top_p"));
  s = Spec("bad", 600, 4);  // max_model_len 512
  auto st = rig.engine->Submit(s).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("prompt"));
  s = Spec("bad", 4, 4);
  s.prompt_tokens[0] = kVocab + 3;
  EXPECT_THAT(std::string(rig.engine->Submit(s).status().message()), HasSubstr("outside the vocabulary"));
  s = Spec("bad", 4, 4);
  s.compression.policy = config::CompressionPolicyKind::kTriAttention;
  EXPECT_THAT(std::string(rig.engine->Submit(s).status().message()), HasSubstr("kv_compression.policy"));
  EXPECT_EQ(rig.engine->InFlight(), 0);
  ExpectNoBlocksLeaked(rig);  // a refused request never takes a block
}

TEST(Engine, QueueBoundsRefuseWithResourceExhausted) {
  config::Config cfg;
  cfg.scheduler.max_waiting = 3;
  cfg.scheduler.max_num_seqs = 1;
  Rig rig(cfg);
  std::vector<std::shared_ptr<TokenStream>> streams;
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    auto s = rig.engine->Submit(Spec("q" + std::to_string(i), 8, 200));
    if (s.ok()) {
      streams.push_back(*s);
    } else {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  for (auto& s : streams) Drain(*s);
  // Accepted requests all complete; afterwards the queue admits again.
  auto after = rig.engine->Submit(Spec("after", 4, 2));
  ASSERT_TRUE(after.ok()) << after.status();
  Drain(**after);
  ExpectNoBlocksLeaked(rig);
}

TEST(Engine, TenantQueueLimitAndPolicyPermissions) {
  config::Config cfg;
  config::TenantConfig gold;
  gold.name = "gold";
  gold.max_queued = 1;
  gold.allowed_policies = {config::CompressionPolicyKind::kFull};
  cfg.tenants = {gold};
  cfg.scheduler.max_num_seqs = 1;
  Rig rig(cfg);
  RequestSpec a = Spec("a", 8, 300);
  a.tenant = "gold";
  RequestSpec b = Spec("b", 8, 300);
  b.tenant = "gold";
  RequestSpec c = Spec("c", 8, 300);
  c.tenant = "gold";
  auto sa = rig.engine->Submit(a);
  ASSERT_TRUE(sa.ok());
  auto sb = rig.engine->Submit(b);
  auto sc = rig.engine->Submit(c);
  // With one slot, at most one of b/c can be queued for the tenant at a time.
  EXPECT_TRUE(!sb.ok() || !sc.ok());
  RequestSpec d = Spec("d", 4, 4);
  d.tenant = "gold";
  d.compression.policy = config::CompressionPolicyKind::kStreamingLlm;
  EXPECT_EQ(rig.engine->Submit(d).status().code(), absl::StatusCode::kPermissionDenied);
  RequestSpec e = Spec("e", 4, 4);
  e.tenant = "nobody";
  EXPECT_EQ(rig.engine->Submit(e).status().code(), absl::StatusCode::kPermissionDenied);
  rig.engine->AbortAll();
  Drain(**sa);
  if (sb.ok()) Drain(**sb);
  if (sc.ok()) Drain(**sc);
  ExpectNoBlocksLeaked(rig);
}

// Holds the engine thread inside the model runner until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(Engine, AbortEndsTheStreamAndFreesBlocks) {
  Gate gate;
  Rig rig({}, 256, 0, [&](int64_t step) {
    if (step >= 3) gate.Wait();  // hold the request mid-decode
  });
  RequestSpec spec = Spec("long", 10, 400);
  spec.ignore_eos = true;
  auto stream = rig.engine->Submit(spec);
  ASSERT_TRUE(stream.ok());
  auto first = (*stream)->pop_wait(std::chrono::seconds(5));
  ASSERT_TRUE(first.has_value());
  rig.engine->Abort("long");
  rig.engine->Abort("long");      // idempotent
  rig.engine->Abort("unknown");   // ignored
  gate.Open();
  Collected c = Drain(**stream);
  EXPECT_EQ(c.finish[0], FinishReason::kAbort);
  EXPECT_LT(c.tokens[0].size() + first->token_ids.size(), 400u);
  ExpectNoBlocksLeaked(rig);
}

// A front end that matched a stop string ends the request with FinishAsStopped: the
// samples end as `stop` (what the request metrics count), and the blocks are freed.
TEST(Engine, FinishAsStoppedEndsTheRequestAsStop) {
  Gate gate;
  Rig rig({}, 256, 0, [&](int64_t step) {
    if (step >= 3) gate.Wait();
  });
  RequestSpec spec = Spec("stopped", 10, 400);
  spec.ignore_eos = true;
  spec.n = 2;
  auto stream = rig.engine->Submit(spec);
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->pop_wait(std::chrono::seconds(5)).has_value());
  rig.engine->FinishAsStopped("stopped");
  gate.Open();
  Collected c = Drain(**stream, 2);
  EXPECT_EQ(c.finish[0], FinishReason::kStop);
  EXPECT_EQ(c.finish[1], FinishReason::kStop);
  ExpectNoBlocksLeaked(rig);
}

TEST(Engine, LogitBiasIsValidatedAgainstTheVocabulary) {
  Rig rig;
  RequestSpec spec = Spec("bias", 4, 4);
  spec.sampling.logit_bias = {{kVocab, 1.0f}};
  auto st = rig.engine->Submit(spec);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("logit_bias"));
  spec.sampling.logit_bias = {{3, 150.0f}};
  EXPECT_EQ(rig.engine->Submit(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.sampling.logit_bias = {{3, -100.0f}};
  auto ok = rig.engine->Submit(spec);
  ASSERT_TRUE(ok.ok()) << ok.status();
  Drain(**ok);
}

TEST(Engine, DrainRefusesNewWorkAndAbortAllEndsInFlight) {
  Gate gate;
  Rig rig({}, 256, 0, [&](int64_t step) {
    if (step >= 3) gate.Wait();  // the request is mid-decode when the gate closes
  });
  auto s = rig.engine->Submit(Spec("inflight", 4, 450));
  ASSERT_TRUE(s.ok());
  rig.engine->StartDrain();
  EXPECT_EQ(rig.engine->Submit(Spec("late", 4, 4)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(rig.engine->InFlight(), 1);
  rig.engine->AbortAll();
  gate.Open();
  Collected c = Drain(**s);
  EXPECT_EQ(c.finish[0], FinishReason::kAbort);
  ExpectNoBlocksLeaked(rig);
}

TEST(Engine, StopAbortsEverythingStillRunning) {
  Gate gate;
  Rig rig({}, 256, 0, [&](int64_t step) {
    if (step >= 3) gate.Wait();
  });
  auto s = rig.engine->Submit(Spec("x", 4, 450));
  ASSERT_TRUE(s.ok());
  std::thread opener([&] {
    // Stop() joins the loop thread, which is parked in the gate: open it once Stop()
    // has been requested, so the loop sees the request at its next iteration.
    while (!rig.engine->stopping()) std::this_thread::yield();
    gate.Open();
  });
  rig.engine->Stop();
  opener.join();
  Collected c = Drain(**s);
  EXPECT_EQ(c.finish[0], FinishReason::kAbort);
  EXPECT_FALSE(rig.engine->Stats().alive);
  EXPECT_EQ(rig.engine->Submit(Spec("y", 4, 4)).status().code(), absl::StatusCode::kUnavailable);
  ExpectNoBlocksLeaked(rig);  // Stop() itself must free what the aborted request held
}

TEST(Engine, PreemptionUnderPressureKeepsOutputsExact) {
  config::Config cfg;
  cfg.cache.block_size = 8;
  cfg.scheduler.max_num_batched_tokens = 64;
  Rig rig(cfg, /*blocks=*/24);  // 23 usable blocks * 8 = 184 tokens for many requests
  std::vector<RequestSpec> specs;
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (int i = 0; i < 16; ++i) {
    specs.push_back(Spec("p" + std::to_string(i), 10 + i % 5, 30 + i % 7, 900 + i));
    auto s = rig.engine->Submit(specs.back());
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    Collected c = Drain(*streams[i]);
    EXPECT_EQ(c.tokens[0], Expected(specs[i])) << i;
  }
  ExpectNoBlocksLeaked(rig);
}

}  // namespace
}  // namespace kvserve::engine
