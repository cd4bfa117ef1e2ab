// How many concurrent long generations a fixed KV pool carries without preemption, with
// `full` and with every compressing policy at equal peak memory (the same budget B and slack,
// so each sequence peaks at B + slack slots). Not a test: it prints figures.
//
//   compression_concurrency_bench [--pool-tokens N] [--requests N] [--prompt N] [--max-tokens N]
//                                 [--budget B] [--divide-length D] [--threads T]
//
// Every request is submitted at once (the worst case: all of them grow in step) with a
// short distinct prompt and greedy decoding of --max-tokens tokens. Admission is the
// engine's (optimistic, like vLLM): when the pool runs out the newest sequences are preempted
// (recompute). Reported per policy: requests that finished without ever being preempted,
// the most sequences running at once, preemptions, peak KV tokens, generated tokens/s and
// the wall time. --divide-length 0 (default) is the budget-scaled slack min(128, B / 4).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/fields.h"
#include "engine/engine_factory.h"
#include "model/model_config.h"

namespace {

using kvserve::config::CompressionPolicyKind;
namespace engine = kvserve::engine;

struct Args {
  int64_t pool_tokens = 8192;
  int requests = 48;
  int prompt = 32;
  int max_tokens = 1024;
  int budget = 128;
  int divide_length = 0;
  int threads = 2;
};

class Observer : public engine::EngineObserver {
 public:
  void OnStep(const engine::StepStats& s) override {
    max_running = std::max(max_running.load(), s.running);
    preemptions += s.preemptions;
    max_physical = std::max(max_physical.load(), s.live_physical_tokens);
  }
  void OnRequestFinished(const engine::RequestTimeline& t) override {
    if (t.num_preemptions == 0 && t.finish == engine::FinishReason::kLength) ++clean;
    ++finished;
  }
  std::atomic<int> max_running{0}, preemptions{0}, clean{0}, finished{0};
  std::atomic<int64_t> max_physical{0};
};

bool Flag(int argc, char** argv, int& i, const char* name, int64_t& out) {
  if (std::strcmp(argv[i], name) != 0 || i + 1 >= argc) return false;
  const char* v = argv[++i];
  std::from_chars(v, v + std::strlen(v), out);
  return true;
}

int RunOne(const Args& a, CompressionPolicyKind kind, int divide_length, const std::string& model_dir) {
  auto mc = kvserve::model::LoadModelConfig(model_dir);
  if (!mc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mc.status().message()).c_str());
    return 1;
  }
  kvserve::config::Config cfg;
  cfg.engine.threads = a.threads;
  cfg.cache.block_size = 16;
  const uint64_t bytes_per_token =
      static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * mc->head_dim * sizeof(float);
  cfg.cache.kv_bytes = static_cast<uint64_t>(a.pool_tokens + 16) * bytes_per_token;  // + the null block
  cfg.cache.host_swap_bytes = 0;
  cfg.cache.enable_prefix_caching = false;
  cfg.scheduler.max_num_seqs = 256;
  Observer obs;
  engine::EngineDeps deps;
  deps.observer = &obs;
  auto e = engine::CreateEngine(cfg, model_dir, std::move(deps));
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", std::string(e.status().message()).c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (int i = 0; i < a.requests; ++i) {
    engine::RequestSpec s;
    s.request_id = "r" + std::to_string(i);
    s.prompt_tokens.push_back(1);
    for (int j = 1; j < a.prompt; ++j) s.prompt_tokens.push_back(261 + (j * 37 + i * 101) % 1700);
    s.max_tokens = a.max_tokens;
    s.ignore_eos = true;
    s.sampling.temperature = 0.0f;
    s.compression.policy = kind;
    if (kind != CompressionPolicyKind::kFull) {
      s.compression.budget = a.budget;
      if (divide_length > 0) s.compression.divide_length = divide_length;
    }
    auto st = (*e)->Submit(s);
    if (!st.ok()) {
      std::fprintf(stderr, "submit: %s\n", std::string(st.status().message()).c_str());
      return 1;
    }
    streams.push_back(*st);
  }
  for (auto& st : streams) {
    while (!st->done()) st->pop_wait(std::chrono::milliseconds(100));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e->reset();
  const double tok_s = static_cast<double>(a.requests) * a.max_tokens / secs;
  std::printf("| %-12s | %4s | %5s | %9d | %11d | %11d | %11lld | %8.0f | %7.1f |\n",
              std::string(kvserve::config::Name(kind)).c_str(),
              kind == CompressionPolicyKind::kFull ? "-" : std::to_string(a.budget).c_str(),
              kind == CompressionPolicyKind::kFull ? "-" : (divide_length > 0 ? std::to_string(divide_length) : "auto").c_str(),
              obs.clean.load(), obs.max_running.load(), obs.preemptions.load(),
              static_cast<long long>(obs.max_physical.load()), tok_s, secs);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    int64_t v = 0;
    if (Flag(argc, argv, i, "--pool-tokens", v)) a.pool_tokens = v;
    else if (Flag(argc, argv, i, "--requests", v)) a.requests = static_cast<int>(v);
    else if (Flag(argc, argv, i, "--prompt", v)) a.prompt = static_cast<int>(v);
    else if (Flag(argc, argv, i, "--max-tokens", v)) a.max_tokens = static_cast<int>(v);
    else if (Flag(argc, argv, i, "--budget", v)) a.budget = static_cast<int>(v);
    else if (Flag(argc, argv, i, "--divide-length", v)) a.divide_length = static_cast<int>(v);
    else if (Flag(argc, argv, i, "--threads", v)) a.threads = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const std::string model_dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  std::printf("pool %lld tokens, %d requests of %d prompt + %d generated tokens, submitted at once\n\n",
              static_cast<long long>(a.pool_tokens), a.requests, a.prompt, a.max_tokens);
  std::printf("| policy       | B    | beta  | no preempt | max running | preemptions | peak KV tok | gen tok/s | wall s  |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  int rc = RunOne(a, CompressionPolicyKind::kFull, 0, model_dir);
  for (auto kind : {CompressionPolicyKind::kTriAttention, CompressionPolicyKind::kStreamingLlm,
                    CompressionPolicyKind::kSnapKv, CompressionPolicyKind::kH2O}) {
    rc |= RunOne(a, kind, a.divide_length, model_dir);  // equal B and slack: equal peak per sequence
  }
  return rc;
}
