// What the HTTP front end adds to time-to-first-token (issue 14's aim: < 1 ms at the median
// with 64 concurrent streams). One process, one engine on the bundled kvs-tiny model (CPU), the
// same streamed greedy completions sent to it two ways, alternated run by run:
//
//   A  in-process: each client thread calls EngineClient::Submit and reads its TokenStream;
//      TTFT = just before Submit -> the first event carrying a token id.
//   B  HTTP: each client thread holds one keep-alive cpp-httplib connection to the real front
//      end (ServerApp: Frontend, OpenAI routes and gRPC on 127.0.0.1, ephemeral ports, built as
//      `kvserve serve` builds it, Prometheus metrics included) and POSTs /v1/completions with
//      "stream": true; TTFT = just before the request is sent -> the first SSE data chunk
//      carrying a token id.
//
// Fairness: both modes drive the same engine (one config, its observer attached in both); run r
// of both modes sends the same prompts; the order alternates (A,B then B,A); one warm-up run per
// mode and concurrency is discarded. C client threads each send --requests-per-client requests
// back to back (a closed loop: C streams in flight; at least --min-requests per run, so small C
// sends more per client), prompts of --prompt-len token ids distinct
// per request (nothing shared between requests; the prefix cache is off unless --prefix-cache, and
// then each mode gets its own prompts of the same shape), --max-tokens tokens each, temperature 0,
// ignore_eos. Per run: TTFT p50/p90 over all its requests. Per mode: the median of the runs'
// figures and their min-max; B - A: the median (min-max) of the paired per-run differences.
// The client threads share the process (and the cores) with the server in both modes;
// --client-nice N lowers their priority in both modes (a load generator on another machine
// would not compete with the server at all).
// Prints figures; asserts nothing.
//
//   http_overhead_bench [--concurrency 64] [--runs 5] [--requests-per-client 2] [--min-requests 32]
//                       [--prompt-len 64] [--max-tokens 16] [--threads 0] [--prefix-cache]
//                       [--client-nice N]
//
// --concurrency C measures 1, 16 and C clients (those <= C).
#include <httplib.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <latch>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/logger.h"
#include "config/config.h"
#include "engine/engine_factory.h"
#include "server/core/tokenizer_text_codec.h"
#include "server/core/wall_clock.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/server_app.h"

namespace {

using namespace kvserve;
using Steady = std::chrono::steady_clock;

constexpr char kModelName[] = "kvs-tiny";

struct Args {
  int concurrency = 64;
  int runs = 5;
  int requests_per_client = 2;
  int min_requests = 32;  // per run: small concurrencies send more per client
  int prompt_len = 64;
  int max_tokens = 16;
  int threads = 0;  // engine.threads; 0: all cores, as `kvserve serve`
  bool prefix_cache = false;
  int client_nice = 0;  // nice value of the client threads (both modes); the server keeps 0
};

bool ParseArgs(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--prefix-cache") {
      a.prefix_cache = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "http_overhead_bench: %s needs a value\n", f.c_str());
      return false;
    }
    const int v = std::atoi(argv[++i]);
    if (f == "--concurrency") a.concurrency = v;
    else if (f == "--runs") a.runs = v;
    else if (f == "--requests-per-client") a.requests_per_client = v;
    else if (f == "--min-requests") a.min_requests = v;
    else if (f == "--prompt-len") a.prompt_len = v;
    else if (f == "--max-tokens") a.max_tokens = v;
    else if (f == "--threads") a.threads = v;
    else if (f == "--client-nice") a.client_nice = v;
    else {
      std::fprintf(stderr, "http_overhead_bench: unknown argument %s\n", f.c_str());
      return false;
    }
  }
  if (a.concurrency < 1 || a.runs < 1 || a.requests_per_client < 1 || a.prompt_len < 2 || a.max_tokens < 1 ||
      a.threads < 0) {
    std::fprintf(stderr, "http_overhead_bench: --concurrency, --runs, --requests-per-client, --max-tokens must be "
                         ">= 1, --prompt-len >= 2, --threads >= 0\n");
    return false;
  }
  return true;
}

std::string CpuModel() {
  std::string model;
  if (FILE* p = popen("lscpu 2>/dev/null", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, p) != nullptr) {
      if (std::strncmp(line, "Model name:", 11) == 0) {
        model = line + 11;
        model.erase(0, model.find_first_not_of(" \t"));
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
        break;
      }
    }
    pclose(p);
  }
  return model.empty() ? "unknown CPU" : model;
}

std::string LoadAverage() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

// BOS, then prompt_len - 1 pseudo-random ids of the model's ordinary vocabulary; distinct per
// (concurrency, run, client, request, salt).
std::vector<int32_t> Prompt(int len, uint64_t key) {
  std::mt19937_64 rng(key * 0x9E3779B97F4A7C15ull + 12345);
  std::vector<int32_t> p;
  p.reserve(len);
  p.push_back(1);
  for (int i = 1; i < len; ++i) p.push_back(static_cast<int32_t>(5 + rng() % 1895));
  return p;
}

std::string CompletionBody(const std::vector<int32_t>& prompt, int max_tokens) {
  std::string b = "{\"model\":\"";
  b += kModelName;
  b += "\",\"prompt\":[";
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i > 0) b += ',';
    b += std::to_string(prompt[i]);
  }
  b += "],\"max_tokens\":" + std::to_string(max_tokens) +
       ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"return_token_ids\":true}";
  return b;
}

// True once `sse` holds a data chunk whose token_ids is not empty.
bool HasToken(const std::string& sse) {
  constexpr std::string_view kKey = "\"token_ids\":[";
  for (size_t at = sse.find(kKey); at != std::string::npos; at = sse.find(kKey, at + 1)) {
    const size_t next = at + kKey.size();
    if (next < sse.size() && sse[next] >= '0' && sse[next] <= '9') return true;
  }
  return false;
}

double Ms(Steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Forwards to the serving metrics (as in `kvserve serve`) and keeps what the engine saw of each
// run: its TTFT (arrival -> first token, engine clock), when requests arrived, how many steps ran.
class RunObserver final : public engine::EngineObserver {
 public:
  explicit RunObserver(engine::EngineObserver& next) : next_(next) {}
  void OnTokens(const engine::RequestLabels& l, int count, base::Nanos itl) override { next_.OnTokens(l, count, itl); }
  void OnRequestFinished(const engine::RequestTimeline& t) override {
    next_.OnRequestFinished(t);
    {
      std::lock_guard<std::mutex> lock(mu_);
      engine_ttft_ms_.push_back(static_cast<double>(t.first_token - t.arrival) / 1e6);
      first_arrival_ = std::min(first_arrival_, t.arrival);
      last_arrival_ = std::max(last_arrival_, t.arrival);
    }
    finished_cv_.notify_all();
  }
  void OnRequestRejected(const engine::RequestLabels& l, const std::string& reason) override {
    next_.OnRequestRejected(l, reason);
  }
  void OnStep(const engine::StepStats& s) override {
    next_.OnStep(s);
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ran_batch) {
      ++steps_;
      step_ms_ += static_cast<double>(s.duration_ns) / 1e6;
    }
  }
  void OnCompressionRound(const engine::CompressionRoundStats& r) override { next_.OnCompressionRound(r); }
  void OnKvTiers(const engine::KvTierStats& t) override { next_.OnKvTiers(t); }

  struct Run {
    std::vector<double> engine_ttft_ms;
    double arrival_window_ms = 0;  // first to last arrival of the run's requests
    int steps = 0;
    double step_ms = 0;  // summed step durations
  };
  // What was seen since the last Take, once `requests` finished (the engine reports a request
  // just after pushing its final event, so a client may be done a moment earlier).
  Run Take(size_t requests) {
    std::unique_lock<std::mutex> lock(mu_);
    finished_cv_.wait_for(lock, std::chrono::seconds(5), [&] { return engine_ttft_ms_.size() >= requests; });
    Run r;
    r.engine_ttft_ms.swap(engine_ttft_ms_);
    r.arrival_window_ms = r.engine_ttft_ms.empty() ? 0 : static_cast<double>(last_arrival_ - first_arrival_) / 1e6;
    r.steps = steps_;
    r.step_ms = step_ms_;
    step_ms_ = 0;
    first_arrival_ = std::numeric_limits<base::Nanos>::max();
    last_arrival_ = std::numeric_limits<base::Nanos>::min();
    steps_ = 0;
    return r;
  }

 private:
  engine::EngineObserver& next_;
  std::mutex mu_;
  std::condition_variable finished_cv_;
  std::vector<double> engine_ttft_ms_;
  base::Nanos first_arrival_ = std::numeric_limits<base::Nanos>::max();
  base::Nanos last_arrival_ = std::numeric_limits<base::Nanos>::min();
  int steps_ = 0;
  double step_ms_ = 0;
};

// Per-thread scheduler figures of this process (/proc/self/task/*/schedstat and status), to
// tell the engine thread's time on a CPU from its time runnable but waiting and from sleeps.
struct ThreadSched {
  double run_ms = 0, wait_ms = 0;
  long voluntary = 0, involuntary = 0;
};
std::map<int, ThreadSched> SchedSnapshot() {
  std::map<int, ThreadSched> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    ThreadSched t;
    if (FILE* f = std::fopen((base + "/schedstat").c_str(), "r")) {
      unsigned long long run = 0, wait = 0;
      if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) {
        t.run_ms = static_cast<double>(run) / 1e6;
        t.wait_ms = static_cast<double>(wait) / 1e6;
      }
      std::fclose(f);
    }
    if (FILE* f = std::fopen((base + "/status").c_str(), "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        std::sscanf(line, "voluntary_ctxt_switches: %ld", &t.voluntary);
        std::sscanf(line, "nonvoluntary_ctxt_switches: %ld", &t.involuntary);
      }
      std::fclose(f);
    }
    out[std::atoi(e->d_name)] = t;
  }
  closedir(dir);
  return out;
}

// The thread that ran longest between the snapshots (the engine loop), as the difference.
ThreadSched BusiestThread(const std::map<int, ThreadSched>& before, const std::map<int, ThreadSched>& after) {
  ThreadSched best;
  for (const auto& [tid, t] : after) {
    auto b = before.find(tid);
    if (b == before.end()) continue;
    ThreadSched d{t.run_ms - b->second.run_ms, t.wait_ms - b->second.wait_ms, t.voluntary - b->second.voluntary,
                  t.involuntary - b->second.involuntary};
    if (d.run_ms > best.run_ms) best = d;
  }
  return best;
}

// Linux nice values are per thread: lowers only the calling client thread.
void NiceClientThread(int nice) {
  if (nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
}

struct RunResult {
  std::vector<double> ttft_ms;
  int failed = 0;
  double wall_ms = 0;
  double user_ms = 0, sys_ms = 0;  // the whole process's CPU time during the run
  ThreadSched busiest;
  RunObserver::Run engine;
};

// One run: `prompts[client][k]`; each client thread sends its requests back to back.
RunResult RunInProcess(engine::ServingEngine& engine, const std::vector<std::vector<std::vector<int32_t>>>& prompts,
                       const Args& a, const std::string& id_prefix) {
  const int clients = static_cast<int>(prompts.size());
  std::vector<std::vector<double>> ttft(clients);
  std::atomic<int> failed{0};
  std::latch start(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      NiceClientThread(a.client_nice);
      start.arrive_and_wait();
      for (size_t k = 0; k < prompts[c].size(); ++k) {
        engine::RequestSpec s;
        s.request_id = id_prefix + "-" + std::to_string(c) + "-" + std::to_string(k);
        s.prompt_tokens = prompts[c][k];
        s.max_tokens = a.max_tokens;
        s.ignore_eos = true;
        s.sampling.temperature = 0.0f;
        const Steady::time_point t0 = Steady::now();
        auto stream = engine.Submit(std::move(s));
        if (!stream.ok()) {
          std::fprintf(stderr, "submit: %s\n", std::string(stream.status().message()).c_str());
          ++failed;
          continue;
        }
        double first = -1;
        bool error = false;
        while (!(*stream)->done()) {
          std::optional<engine::TokenEvent> ev = (*stream)->pop_wait(std::chrono::milliseconds(100));
          if (!ev) continue;
          if (first < 0 && !ev->token_ids.empty()) first = Ms(Steady::now() - t0);
          error |= ev->finish == engine::FinishReason::kError || ev->finish == engine::FinishReason::kAbort;
        }
        if (first < 0 || error) {
          ++failed;
        } else {
          ttft[c].push_back(first);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  RunResult r;
  r.failed = failed.load();
  for (auto& v : ttft) r.ttft_ms.insert(r.ttft_ms.end(), v.begin(), v.end());
  return r;
}

RunResult RunHttp(std::vector<std::unique_ptr<httplib::Client>>& conns,
                  const std::vector<std::vector<std::vector<int32_t>>>& prompts, const Args& a) {
  const int clients = static_cast<int>(prompts.size());
  std::vector<std::vector<double>> ttft(clients);
  std::atomic<int> failed{0};
  std::latch start(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      NiceClientThread(a.client_nice);
      httplib::Client& cli = *conns[c];
      std::vector<std::string> bodies;
      for (const auto& p : prompts[c]) bodies.push_back(CompletionBody(p, a.max_tokens));
      // Untimed: opens the connection or refreshes its keep-alive, so the timed requests reuse it.
      if (auto h = cli.Get("/health"); !h || h->status != 200) ++failed;
      start.arrive_and_wait();
      for (const std::string& body : bodies) {
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = body;
        req.set_header("Content-Type", "application/json");
        std::string seen;
        double first = -1;
        Steady::time_point t0;
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
          if (first < 0) {
            seen.append(data, n);
            if (HasToken(seen)) first = Ms(Steady::now() - t0);
          }
          return true;
        };
        t0 = Steady::now();
        httplib::Result res = cli.send(req);
        if (!res || res->status != 200 || first < 0) {
          if (!res) std::fprintf(stderr, "http: %s\n", httplib::to_string(res.error()).c_str());
          else if (res->status != 200) std::fprintf(stderr, "http: status %d: %s\n", res->status, seen.c_str());
          ++failed;
        } else {
          ttft[c].push_back(first);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  RunResult r;
  r.failed = failed.load();
  for (auto& v : ttft) r.ttft_ms.insert(r.ttft_ms.end(), v.begin(), v.end());
  return r;
}

// Nearest-rank quantile.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// "median (min to max)" of per-run figures.
std::string Summary(const std::vector<double>& v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f (%.2f to %.2f)", Median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

struct ModeFigures {
  std::vector<double> p50, p90;
  int failed = 0;
  // Where the time goes (per run): the engine's own TTFT p50 (arrival -> first token), the
  // process's CPU time, the engine thread's time runnable but not running.
  std::vector<double> engine_p50, cpu_ms, engine_wait_ms, wall_ms;

  void Add(const RunResult& r) {
    p50.push_back(Quantile(r.ttft_ms, 0.5));
    p90.push_back(Quantile(r.ttft_ms, 0.9));
    failed += r.failed;
    engine_p50.push_back(Quantile(r.engine.engine_ttft_ms, 0.5));
    cpu_ms.push_back(r.user_ms + r.sys_ms);
    engine_wait_ms.push_back(r.busiest.wait_ms);
    wall_ms.push_back(r.wall_ms);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) return 2;
  const std::string load_at_start = LoadAverage();
  const std::string model_dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";

  config::Config cfg;
  cfg.engine.threads = a.threads;
  cfg.cache.enable_prefix_caching = a.prefix_cache;
  cfg.cache.host_swap_bytes = 0;  // nothing is preempted at these sizes
  cfg.server.host = "127.0.0.1";
  cfg.server.http_port = 0;
  cfg.server.grpc_port = 0;

  auto sinks = base::LogSinks::Stderr(base::LogLevel::kWarn, base::LogFormat::kText);
  base::Logger logger(sinks, "bench");
  auto codec = server::TokenizerTextCodec::Load(model_dir, cfg.model.chat_template);
  if (!codec.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", std::string(codec.status().message()).c_str());
    return 1;
  }
  server::PrometheusMetricsOptions mo;
  mo.model_name = kModelName;
  server::PrometheusMetrics metrics(std::move(mo));
  auto clock = std::make_shared<base::SteadyClock>();
  engine::EngineDeps deps;
  deps.logger = logger.child("engine");
  deps.clock = clock;
  RunObserver observer(metrics);
  deps.observer = &observer;
  auto engine = engine::CreateEngine(cfg, model_dir, std::move(deps));
  if (!engine.ok()) {
    std::fprintf(stderr, "engine: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }

  server::WallClock wall_clock;
  server::ServerAppOptions so;
  so.server = cfg.server;
  so.model_name = kModelName;
  so.version = "bench";
  so.id_seed = 42;
  so.metrics_text = [&metrics] { return metrics.ExpositionText(); };
  so.on_http_response = [&metrics](std::string_view route, int status) { metrics.OnHttpResponse(route, status); };
  so.on_grpc_status = [&metrics](std::string_view method, int code) { metrics.OnGrpcStatus(method, code); };
  server::ServerAppDeps sd;
  sd.engine = engine->get();
  sd.codec = codec->get();
  sd.clock = clock.get();
  sd.wall_clock = &wall_clock;
  sd.logger = logger.child("server");
  auto app = std::make_unique<server::ServerApp>(std::move(so), std::move(sd));
  if (absl::Status st = app->Start(); !st.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(st.message()).c_str());
    return 1;
  }

  std::vector<int> levels;
  for (int c : {1, 16, a.concurrency}) {
    if (c <= a.concurrency && std::find(levels.begin(), levels.end(), c) == levels.end()) levels.push_back(c);
  }
  struct Row {
    int concurrency;
    int per_client;
    ModeFigures in_process, http;
    std::vector<double> d50, d90;
  };
  std::vector<Row> rows;
  const auto wall0 = Steady::now();
  for (int c : levels) {
    const int per_client = std::max(a.requests_per_client, (a.min_requests + c - 1) / c);
    Row row{c, per_client, {}, {}, {}, {}};
    std::vector<std::unique_ptr<httplib::Client>> conns;
    for (int i = 0; i < c; ++i) {
      auto cli = std::make_unique<httplib::Client>("127.0.0.1", app->http_port());
      cli->set_keep_alive(true);
      cli->set_tcp_nodelay(true);  // as OpenAI-style clients do; the server sets it too
      cli->set_read_timeout(120, 0);
      conns.push_back(std::move(cli));
    }
    for (int run = -1; run < a.runs; ++run) {  // run -1: warm-up, discarded
      // prompts[mode][client][k]; the same for both modes unless the prefix cache is on.
      std::vector<std::vector<std::vector<int32_t>>> prompts[2];
      for (int mode = 0; mode < 2; ++mode) {
        const int salt = a.prefix_cache ? mode : 0;
        prompts[mode].resize(c);
        for (int i = 0; i < c; ++i) {
          for (int k = 0; k < per_client; ++k) {
            const uint64_t key = ((((static_cast<uint64_t>(c) * 1000 + (run + 1)) * 1000 + i) * 100 + k) * 2) + salt;
            prompts[mode][i].push_back(Prompt(a.prompt_len, key));
          }
        }
      }
      const bool a_first = run < 0 || run % 2 == 0;
      RunResult res[2];
      for (int step = 0; step < 2; ++step) {
        const int mode = a_first ? step : 1 - step;  // 0: in-process, 1: HTTP
        const Steady::time_point run0 = Steady::now();
        rusage ru0{};
        getrusage(RUSAGE_SELF, &ru0);
        const std::map<int, ThreadSched> sched0 = SchedSnapshot();
        res[mode] = mode == 0 ? RunInProcess(**engine, prompts[0], a,
                                             "c" + std::to_string(c) + "r" + std::to_string(run))
                              : RunHttp(conns, prompts[1], a);
        res[mode].wall_ms = Ms(Steady::now() - run0);
        rusage ru1{};
        getrusage(RUSAGE_SELF, &ru1);
        auto tv_ms = [](timeval t0, timeval t1) {
          return static_cast<double>(t1.tv_sec - t0.tv_sec) * 1e3 + static_cast<double>(t1.tv_usec - t0.tv_usec) / 1e3;
        };
        res[mode].user_ms = tv_ms(ru0.ru_utime, ru1.ru_utime);
        res[mode].sys_ms = tv_ms(ru0.ru_stime, ru1.ru_stime);
        res[mode].busiest = BusiestThread(sched0, SchedSnapshot());
        res[mode].engine = observer.Take(static_cast<size_t>(c) * per_client - res[mode].failed);
      }
      for (int mode = 0; mode < 2; ++mode) {
        const RunResult& r = res[mode];
        std::fprintf(stderr,
                     "concurrency %d run %d%s %s: TTFT p50 %.2f p90 %.2f ms (%d failed); engine: TTFT p50 %.2f ms, "
                     "arrivals within %.2f ms, %d steps taking %.1f of %.1f ms; process CPU user %.0f sys %.0f ms; "
                     "busiest thread: on CPU %.0f ms, runnable waiting %.0f ms, %ld voluntary / %ld involuntary "
                     "switches\n",
                     c, run, run < 0 ? " (warm-up)" : "", mode == 0 ? "A" : "B", Quantile(r.ttft_ms, 0.5),
                     Quantile(r.ttft_ms, 0.9), r.failed, Quantile(r.engine.engine_ttft_ms, 0.5),
                     r.engine.arrival_window_ms, r.engine.steps, r.engine.step_ms, r.wall_ms, r.user_ms, r.sys_ms, r.busiest.run_ms,
                     r.busiest.wait_ms, r.busiest.voluntary, r.busiest.involuntary);
      }
      if (run < 0) continue;
      row.in_process.Add(res[0]);
      row.http.Add(res[1]);
      row.d50.push_back(row.http.p50.back() - row.in_process.p50.back());
      row.d90.push_back(row.http.p90.back() - row.in_process.p90.back());
    }
    rows.push_back(std::move(row));
  }
  const double wall_s = std::chrono::duration<double>(Steady::now() - wall0).count();
  app->Stop();
  app.reset();
  engine->reset();

  std::printf("kvs-tiny on the CPU backend (engine.threads %d; 0: all cores), C client threads each sending "
              "max(%d, %d / C) requests back to back per run, prompts of %d token ids (none shared; prefix cache %s), "
              "%d generated tokens, greedy, streamed. A = in-process `EngineClient::Submit`, B = HTTP "
              "`POST /v1/completions` (one keep-alive cpp-httplib connection per client, same process; client "
              "threads at nice %d). "
              "TTFT in ms: median over %d runs of each run's p50/p90 (min to max); B - A: median of the "
              "paired per-run differences (min to max); one warm-up run per mode discarded; modes alternated.\n\n",
              a.threads, a.requests_per_client, a.min_requests, a.prompt_len, a.prefix_cache ? "on" : "off",
              a.max_tokens, a.client_nice, a.runs);
  std::printf("CPU: %s, %u CPUs; load average at start %s, at end %s; %.0f s\n\n", CpuModel().c_str(),
              std::thread::hardware_concurrency(), load_at_start.c_str(), LoadAverage().c_str(), wall_s);
  std::printf("| concurrency | requests/run | A p50 | A p90 | B p50 | B p90 | B - A p50 | B - A p90 | failed A/B |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %d | %d | %s | %s | %s | %s | %s | %s | %d/%d |\n", r.concurrency, r.concurrency * r.per_client,
                Summary(r.in_process.p50).c_str(),
                Summary(r.in_process.p90).c_str(), Summary(r.http.p50).c_str(), Summary(r.http.p90).c_str(),
                Summary(r.d50).c_str(), Summary(r.d90).c_str(), r.in_process.failed, r.http.failed);
  }
  std::printf("\nWhere B's extra time goes (medians over the runs, ms): the engine's own TTFT p50 (arrival -> first "
              "token, so without the HTTP legs), the run's wall time, the process's CPU time (user + sys, clients "
              "included), and the engine loop thread's time runnable but not running (/proc schedstat).\n\n");
  std::printf("| concurrency | engine TTFT p50 A | B | run wall A | B | process CPU A | B | engine thread waiting for "
              "a CPU A | B |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %d | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.concurrency,
                Median(r.in_process.engine_p50), Median(r.http.engine_p50), Median(r.in_process.wall_ms),
                Median(r.http.wall_ms), Median(r.in_process.cpu_ms), Median(r.http.cpu_ms),
                Median(r.in_process.engine_wait_ms), Median(r.http.engine_wait_ms));
  }
  return 0;
}
