// TTFT of a 1,500-token shared prefix served from each tier of the prefix cache, side by side
// in one run on the bundled kvs-tiny model (CPU backend):
//   cold    the prompt is computed from scratch
//   device  the prefix is still in the KV pool (local hit)
//   host    the prefix was evicted to the host prefix tier and is loaded back
//   redis   a second engine fetches the prefix another engine published to Redis
// Each round uses a fresh prefix; medians over the rounds and ratios to cold are printed with
// the CPU model. Starts its own redis-server (Debian package) on a free port and stops it.
//
//   kv_tier_bench [--rounds N] [--threads T]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_factory.h"
#include "model/model_config.h"

namespace {

using namespace kvserve;
using Clock = std::chrono::steady_clock;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 0;
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(5 + (i * 131 + salt * 977) % 1900);
  return p;
}

// Seconds from Submit to the first token; negative on failure.
double Ttft(engine::ServingEngine& e, const std::string& id, std::vector<int32_t> prompt, int64_t* cached) {
  engine::RequestSpec s;
  s.request_id = id;
  s.prompt_tokens = std::move(prompt);
  s.max_tokens = 2;
  s.ignore_eos = true;
  s.sampling.temperature = 0.0f;
  const auto t0 = Clock::now();
  auto st = e.Submit(std::move(s));
  if (!st.ok()) return -1;
  double ttft = -1;
  while (!(*st)->done()) {
    auto ev = (*st)->pop_wait(std::chrono::milliseconds(100));
    if (!ev) continue;
    if (ttft < 0 && !ev->token_ids.empty()) ttft = std::chrono::duration<double>(Clock::now() - t0).count();
    if (ev->usage) *cached = ev->usage->cached_prompt_tokens;
  }
  return ttft;
}

// Lookup latencies of the remote tier (queued -> answered), reported by the engine.
class LookupLatencies : public engine::EngineObserver {
 public:
  void OnKvTiers(const engine::KvTierStats& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    seconds_.insert(seconds_.end(), t.remote_load_seconds.begin(), t.remote_load_seconds.end());
    written_ = t.written_bytes[engine::KvTierStats::kRemote];
  }
  uint64_t written() {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }
  std::vector<double> seconds() {
    std::lock_guard<std::mutex> lock(mu_);
    return seconds_;
  }

 private:
  std::mutex mu_;
  std::vector<double> seconds_;
  uint64_t written_ = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
  }
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  auto mc = model::LoadModelConfig(dir);
  if (!mc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mc.status().message()).c_str());
    return 1;
  }
  const uint64_t bpb =
      static_cast<uint64_t>(mc->num_layers) * 2 * mc->num_kv_heads * 16 * mc->head_dim * sizeof(float);

  const int port = FreePort();
  const pid_t redis = fork();
  if (redis == 0) {
    const std::string p = std::to_string(port);
    execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly",
           "no", "--loglevel", "warning", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  config::Config cfg;
  cfg.engine.threads = threads;
  cfg.cache.block_size = 16;
  cfg.cache.kv_bytes = 110 * bpb;  // one 1,500-token prompt (94 blocks) and a little more
  cfg.cache.host_swap_bytes = 0;
  cfg.cache.host_cache_bytes = 400 * bpb;
  cfg.cache.remote_kv_url = "redis://127.0.0.1:" + std::to_string(port);
  cfg.cache.remote_kv_timeout_seconds = 1.0;
  LookupLatencies a_tiers;  // for the bytes a wrote to redis
  engine::EngineDeps a_deps;
  a_deps.observer = &a_tiers;
  auto a = engine::CreateEngine(cfg, dir, std::move(a_deps));
  LookupLatencies b_lookups;
  engine::EngineDeps b_deps;
  b_deps.observer = &b_lookups;
  auto b = engine::CreateEngine(cfg, dir, std::move(b_deps));
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string((a.ok() ? b.status() : a.status()).message()).c_str());
    kill(redis, SIGKILL);
    waitpid(redis, nullptr, 0);
    return 1;
  }
  constexpr int kPrefix = 1500;
  std::vector<double> cold, device, host, remote;
  int64_t cached[4] = {-1, -1, -1, -1};
  (void)Ttft(**a, "warmup", Prompt(64, 999), &cached[0]);
  for (int r = 0; r < rounds; ++r) {
    const std::vector<int32_t> p = Prompt(kPrefix, r);
    const std::string n = std::to_string(r);
    const uint64_t written_before = a_tiers.written();
    cold.push_back(Ttft(**a, "cold" + n, p, &cached[0]));
    device.push_back(Ttft(**a, "device" + n, p, &cached[1]));
    // Write-through of the prefix's blocks reaches redis (reported after a's next step).
    const uint64_t want = written_before + static_cast<uint64_t>((kPrefix - 1) / 16) * bpb;
    for (int i = 0; i < 200 && a_tiers.written() < want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      int64_t ignored = 0;
      (void)Ttft(**a, "tick" + n + "_" + std::to_string(i), Prompt(8, 5000 + i), &ignored);
    }
    remote.push_back(Ttft(**b, "redis" + n, p, &cached[3]));
    int64_t ignored = 0;
    (void)Ttft(**a, "evict" + n, Prompt(kPrefix, 1000 + r), &ignored);  // pushes p to the host tier
    host.push_back(Ttft(**a, "host" + n, p, &cached[2]));
    // b must not keep p on its device for the next round's redis measurement: it never sees p again.
  }
  std::printf("kv_tier_bench: TTFT of a %d-token prompt (kvs-tiny, CPU, %d thread(s)), median of %d rounds\n",
              kPrefix, threads, rounds);
  std::printf("CPU: %s\n", CpuModel().c_str());
  const double c = Median(cold);
  const char* names[4] = {"cold", "device hit", "host-tier hit", "redis hit"};
  const std::vector<double>* series[4] = {&cold, &device, &host, &remote};
  std::printf("%-14s %12s %10s %14s\n", "tier", "TTFT ms", "vs cold", "cached tokens");
  for (int i = 0; i < 4; ++i) {
    const double m = Median(*series[i]);
    std::printf("%-14s %12.2f %9.2fx %14lld\n", names[i], m * 1e3, m > 0 ? c / m : 0.0,
                static_cast<long long>(cached[i]));
  }
  std::printf("redis lookup (one pipelined round trip of %d blocks, checked): median %.2f ms\n", (kPrefix - 1) / 16,
              Median(b_lookups.seconds()) * 1e3);
  a->reset();
  b->reset();
  kill(redis, SIGKILL);
  waitpid(redis, nullptr, 0);
  return 0;
}
