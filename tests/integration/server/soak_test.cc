// Soak under faults (docs/reliability.md): the real daemon (`kvserve serve` on the bundled
// model) on 127.0.0.1 with a KV pool small enough that sequences are preempted both ways
// (swap while the small host tier has room, recompute when it is full), driven by many
// concurrent clients over HTTP and gRPC with a deterministic mix of requests:
//
//   well-formed   completions and chats, streaming and not, n = 1 or 2, half of them with
//                 kv_compression (triattention, snapkv, auto), prompts sharing prefixes, from
//                 two tenants                                   -> complete (exact token count)
//   probes        greedy requests whose text a quiet run fixed  -> the same text under load
//   disconnects   10 %: streams the client drops (HTTP: closes the socket; gRPC: cancels)
//                 after the first token                          -> aborted, KV freed
//   malformed     5 %: bad JSON, unknown role, n over the limit, bad logit_bias, too-long
//                 prompt, negative max_tokens (HTTP); no prompt, unknown policy (gRPC)
//                                                                -> 4xx / INVALID_ARGUMENT
//   slow readers  ~1 %: streams read a few bytes at a time with pauses -> complete
//
// Afterwards: the daemon is up and idle; every KV and swap block is free (its metrics); its
// open fds and threads are within a bound of the baseline taken after the quiet run (pooled
// connection threads stay: baseline + client count); its RSS grew by a bounded amount. KVSERVE_SOAK_REQUESTS sets the size (ctest: soak_reduced, label integration,
// runs in CI; soak_full, label slow, >= 2,000 requests). Config reload: one SIGHUP in the
// middle of the run (kvserve re-reads its API keys; the same ones here), which must not
// disturb any request; the daemon's log must show the reload.
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tests/integration/server/server_process.h"

namespace kvserve::server::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// kvs-tiny: 4 layers x 2 KV heads x 48 dims, fp32, 16-token blocks = 48 KiB a block. 32
// blocks hold a few of the 32 sequences allowed to run; the 16-block host tier takes a few
// swapped ones, the rest are recomputed.
constexpr char kConfig[] = R"({
  "logging": {"level": "info"},
  "model": {"max_model_len": 512},
  "cache": {"block_size": 16, "kv_bytes": 1572864, "host_swap_bytes": 786432},
  "scheduler": {"max_num_seqs": 32, "max_waiting": 100000, "preemption_mode": "swap"},
  "compression": {"budget": 96, "divide_length": 8, "window": 8, "sinks": 4},
  "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "max_n": 4,
             "max_stop_strings": 4, "http_max_connections": 256},
  "tenants": [{"name": "alpha", "api_keys": ["sk-alpha"]}, {"name": "beta", "api_keys": ["sk-beta"]}]
})";

// Shared prefixes (prefix-cache hits across requests of a tenant, isolation across tenants).
const char* const kPrefixes[] = {
    "The old lighthouse keeper climbed the stairs every evening and looked out over the grey sea, "
    "counting the ships that passed",
    "In the spring of that year the village held a market in the square, where farmers sold bread, "
    "cheese and apples",
};
const char* const kSuffixes[] = {" before", " while the wind", " and then", " until the night", " so that"};

int Requests() {
  const char* n = std::getenv("KVSERVE_SOAK_REQUESTS");
  return n != nullptr ? std::max(50, std::atoi(n)) : 300;
}

struct ProcStats {
  int fds = 0;
  int threads = 0;
  long rss_kb = 0;
};

ProcStats ReadProc(pid_t pid) {
  ProcStats s;
  const std::string dir = "/proc/" + std::to_string(pid);
  if (DIR* d = opendir((dir + "/fd").c_str())) {
    while (dirent* e = readdir(d)) s.fds += e->d_name[0] != '.';
    closedir(d);
  }
  std::ifstream status(dir + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::atoi(line.c_str() + 8);
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::atol(line.c_str() + 6);
  }
  return s;
}

// "name x count" of the process's threads (their comm), for a failure message.
std::string ThreadNames(pid_t pid) {
  std::map<std::string, int> names;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(dir + "/" + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      ++names[name];
    }
    closedir(d);
  }
  std::string out;
  for (const auto& [name, n] : names) out += name + " x" + std::to_string(n) + "; ";
  return out;
}

// The value of the first sample of `name` whose labels contain `label` (e.g. state="used");
// -1 when there is none. Every kvserve series also carries model="...".
double Metric(const std::string& text, const std::string& name, const std::string& label = "") {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    if (line[name.size()] != '{' && line[name.size()] != ' ') continue;
    const size_t space = line.rfind(' ');
    if (!label.empty() && line.substr(0, space).find(label) == std::string::npos) continue;
    return std::stod(line.substr(space + 1));
  }
  return -1;
}

class SoakTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("soak.json", kConfig)},
                                   milliseconds(120000), &error);
    ASSERT_NE(server_, nullptr) << error;
    channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = v1::KvServe::NewStub(channel_);
  }
  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "server stderr (tail):\n" << Tail(server_->stderr_text(), 4000);
  }
  static std::string Tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

  httplib::Client Client() {
    httplib::Client c(server_->host(), server_->http_port());
    c.set_read_timeout(300, 0);
    return c;
  }
  static httplib::Headers Auth(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }
  std::string MetricsText() {
    auto r = Client().Get("/metrics");
    return r && r->status == 200 ? r->body : "";
  }

  // A greedy probe's text over HTTP (non-streaming), or "" with a failure recorded.
  std::string Probe(httplib::Client& c, int i) {
    static const char* const kPolicies[] = {"full", "full", "triattention", "snapkv"};
    json body = {{"prompt", std::string(kPrefixes[i % 2]) + kSuffixes[i]},
                 {"max_tokens", 80}, {"temperature", 0}, {"ignore_eos", true},
                 {"kv_compression", {{"policy", kPolicies[i]}}}};
    auto r = c.Post("/v1/completions", Auth(i % 2 ? "sk-beta" : "sk-alpha"), body.dump(), "application/json");
    if (!r || r->status != 200) {
      std::lock_guard<std::mutex> l(probe_error_mu_);
      probe_error_ = r ? std::to_string(r->status) + " " + r->body : "no response";
      return "";
    }
    return json::parse(r->body)["choices"][0]["text"].get<std::string>();
  }

  // Opens a streaming completion on a raw socket; returns the fd after the response head
  // (-1 on failure). `rcvbuf` > 0 shrinks the receive buffer (slow readers).
  int OpenRawStream(int max_tokens, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    const std::string body = json({{"prompt", std::string(kPrefixes[0]) + " and"}, {"max_tokens", max_tokens},
                                   {"ignore_eos", true}, {"stream", true}})
                                 .dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
                            "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      close(fd);
      return -1;
    }
    return fd;
  }

  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvServe::Stub> stub_;
  std::mutex probe_error_mu_;
  std::string probe_error_;  // the last failed probe's status and body
};

struct Tally {
  std::atomic<int> completed{0}, clean_errors{0}, malformed_4xx{0}, disconnects{0}, slow_ok{0};
  std::atomic<int> probes{0}, grpc{0}, http{0}, compressed{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::map<std::string, int> error_reasons;
  void Fail(std::string what) {
    std::lock_guard<std::mutex> l(mu);
    failures.push_back(std::move(what));
  }
  void CleanError(const std::string& reason) {
    ++clean_errors;
    std::lock_guard<std::mutex> l(mu);
    ++error_reasons[reason];
  }
};

TEST_F(SoakTest, ManyMixedRequestsUnderFaultsLoseAndLeakNothing) {
  const int total = Requests();
  // Quiet run: the probes' greedy texts with nothing else running.
  std::vector<std::string> expected(4);
  {
    httplib::Client c = Client();
    for (int i = 0; i < 4; ++i) {
      expected[i] = Probe(c, i);
      ASSERT_FALSE(expected[i].empty()) << "probe " << i << " failed in the quiet run: " << probe_error_;
    }
  }
  std::this_thread::sleep_for(milliseconds(500));
  const ProcStats baseline = ReadProc(server_->pid());
  const double preempt_before = Metric(MetricsText(), "kvserve_num_preemptions_total");

  Tally t;
  std::atomic<int> next{0};
  auto worker = [&](int w) {
    httplib::Client c = Client();
    std::mt19937 rng(1234 + w);
    for (int i = next++; i < total; i = next++) {
      const int kind = i % 100;  // deterministic mix per index
      const std::string key = i % 2 ? "sk-beta" : "sk-alpha";
      const std::string prompt = std::string(kPrefixes[(i / 2) % 2]) + kSuffixes[i % 5] + " " + std::to_string(i % 7);
      if (kind < 5) {  // ---------------------------------------------------- malformed
        if (kind == 4) {
          ++t.grpc;
          v1::GenerateRequest r;  // no prompt, or an unknown policy
          if (i % 200 < 100) {
            r.set_prompt("x");
            r.mutable_kv_compression()->set_policy("zip");
          }
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", "Bearer " + key);
          v1::CompleteResponse out;
          const grpc::Status st = stub_->Complete(&ctx, r, &out);
          if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT && !st.error_message().empty()) ++t.malformed_4xx;
          else t.Fail("malformed gRPC request " + std::to_string(i) + " got code " + std::to_string(st.error_code()));
          continue;
        }
        ++t.http;
        static const char* const kBad[] = {
            R"({"prompt": "a", "max_tokens": )",
            R"({"messages": [{"role": "wizard", "content": "x"}]})",
            R"({"prompt": "a", "n": 9})",
            R"({"prompt": "a", "logit_bias": {"x": 1}})",
        };
        std::string body = kBad[kind % 4];
        const bool chat = kind % 4 == 1;
        if (i % 300 == 0) body = json({{"prompt", std::string(6000, 'z')}, {"max_tokens", 4}}).dump();  // too long
        if (i % 300 == 100) body = R"({"prompt": "a", "max_tokens": -3})";
        auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", Auth(key), body, "application/json");
        if (r && r->status >= 400 && r->status < 500 && json::parse(r->body, nullptr, false).contains("error")) {
          ++t.malformed_4xx;
        } else {
          t.Fail("malformed request " + std::to_string(i) + " got " + (r ? std::to_string(r->status) : "no response"));
        }
        continue;
      }
      if (kind < 15) {  // ---------------------------------------------- disconnect mid-stream
        if (kind % 2 == 0) {
          ++t.http;
          const int fd = OpenRawStream(200, 0);
          if (fd < 0) {
            t.Fail("disconnect " + std::to_string(i) + ": could not open the stream");
            continue;
          }
          std::string seen;
          char buf[512];
          ssize_t n;
          while (seen.find("data: ") == std::string::npos && (n = recv(fd, buf, sizeof buf, 0)) > 0) seen.append(buf, n);
          close(fd);
        } else {
          ++t.grpc;
          v1::GenerateRequest r;
          r.set_prompt(prompt);
          r.mutable_sampling()->set_max_tokens(200);
          r.mutable_sampling()->set_ignore_eos(true);
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", "Bearer " + key);
          auto reader = stub_->Generate(&ctx, r);
          v1::GenerateChunk chunk;
          reader->Read(&chunk);
          ctx.TryCancel();
          while (reader->Read(&chunk)) {
          }
          (void)reader->Finish();
        }
        ++t.disconnects;
        continue;
      }
      if (kind == 15) {  // --------------------------------------------------------- slow reader
        ++t.http;
        const int fd = OpenRawStream(24, 4096);
        if (fd < 0) {
          t.Fail("slow reader " + std::to_string(i) + ": could not open the stream");
          continue;
        }
        std::string all;
        char buf[64];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
          all.append(buf, n);
          std::this_thread::sleep_for(milliseconds(15));
        }
        close(fd);
        if (all.find("data: [DONE]") != std::string::npos) ++t.slow_ok;
        else t.Fail("slow reader " + std::to_string(i) + " did not get [DONE]");
        continue;
      }
      if (kind == 16 || kind == 66) {  // ---------------------------------------------- probes
        ++t.http;
        const int p = (i / 100 + kind) % 4;
        const std::string got = Probe(c, p);
        ++t.probes;
        if (got != expected[p]) t.Fail("probe " + std::to_string(p) + " at request " + std::to_string(i) +
                                       ": \"" + got + "\" != quiet run's \"" + expected[p] + "\"");
        continue;
      }
      // ------------------------------------------------------------------------ well-formed
      const int max_tokens = 4 + static_cast<int>(rng() % 20);
      const int n = (i % 5 == 0) ? 2 : 1;
      static const char* const kPolicies[] = {"triattention", "snapkv", "auto"};
      const bool compress = i % 2 == 0;
      if (compress) ++t.compressed;
      const bool stream = i % 3 == 0;
      if (i % 4 == 3) {  // gRPC: Generate (streamed) or Chat
        ++t.grpc;
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + key);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
        v1::SamplingParams sp;
        sp.set_max_tokens(max_tokens);
        sp.set_ignore_eos(true);
        sp.set_n(n);
        v1::KvCompression kc;
        if (compress) kc.set_policy(kPolicies[i % 3]);
        std::unique_ptr<grpc::ClientReader<v1::GenerateChunk>> reader;
        v1::GenerateRequest g;
        v1::ChatRequest ch;
        if (i % 8 == 3) {
          auto* m = ch.add_messages();
          m->set_role("user");
          m->set_content(prompt);
          *ch.mutable_sampling() = sp;
          *ch.mutable_kv_compression() = kc;
          reader = stub_->Chat(&ctx, ch);
        } else {
          g.set_prompt(prompt);
          *g.mutable_sampling() = sp;
          *g.mutable_kv_compression() = kc;
          reader = stub_->Generate(&ctx, g);
        }
        v1::GenerateChunk chunk;
        std::vector<int> tokens(n, 0);
        std::vector<std::string> finish(n);
        while (reader->Read(&chunk)) {
          if (chunk.index() >= 0 && chunk.index() < n) {
            tokens[chunk.index()] += chunk.token_ids_size();
            if (!chunk.finish_reason().empty()) finish[chunk.index()] = chunk.finish_reason();
          }
        }
        const grpc::Status st = reader->Finish();
        if (!st.ok()) {
          if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && !st.error_message().empty())
            t.CleanError("grpc " + std::to_string(st.error_code()));
          else
            t.Fail("gRPC request " + std::to_string(i) + " failed: " + st.error_message());
          continue;
        }
        bool ok = true;
        for (int s = 0; s < n; ++s) ok &= tokens[s] == max_tokens && finish[s] == "length";
        if (ok) ++t.completed;
        else t.Fail("gRPC request " + std::to_string(i) + ": a sample ended early (" + finish[0] + ")");
        continue;
      }
      ++t.http;
      const bool chat = i % 7 == 1;
      json body = {{"max_tokens", max_tokens}, {"ignore_eos", true}, {"n", n}, {"stream", stream}};
      if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
      else body["prompt"] = prompt;
      if (compress) body["kv_compression"] = {{"policy", kPolicies[i % 3]}};
      auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", Auth(key), body.dump(), "application/json");
      if (!r) {
        t.Fail("HTTP request " + std::to_string(i) + ": no response (" + httplib::to_string(r.error()) + ")");
        continue;
      }
      if (r->status == 429 || r->status == 503) {
        if (json::parse(r->body, nullptr, false).contains("error")) t.CleanError("http " + std::to_string(r->status));
        else t.Fail("HTTP request " + std::to_string(i) + ": " + std::to_string(r->status) + " without a reason");
        continue;
      }
      if (r->status != 200) {
        t.Fail("HTTP request " + std::to_string(i) + ": status " + std::to_string(r->status) + " " + r->body);
        continue;
      }
      int finished = 0;
      if (stream) {
        // Every sample ends with finish_reason "length" and the stream with [DONE].
        std::istringstream in(r->body);
        std::string line;
        bool done = false;
        while (std::getline(in, line)) {
          if (line == "data: [DONE]") done = true;
          else if (line.rfind("data: ", 0) == 0) {
            json ev = json::parse(line.substr(6), nullptr, false);
            if (ev.contains("choices"))
              for (const auto& ch : ev["choices"]) finished += ch.value("finish_reason", json()).is_string();
          }
        }
        if (!done) finished = -1;
      } else {
        json j = json::parse(r->body, nullptr, false);
        for (const auto& ch : j["choices"]) finished += ch["finish_reason"] == "length";
        if (j["usage"]["completion_tokens"] != max_tokens * n) finished = -1;
      }
      if (finished == n) ++t.completed;
      else t.Fail("HTTP request " + std::to_string(i) + ": incomplete response " + r->body.substr(0, 300));
    }
  };
  constexpr int kWorkers = 48;
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int w = 0; w < kWorkers; ++w) workers.emplace_back(worker, w);
  std::this_thread::sleep_for(milliseconds(200));
  server_->Signal(SIGHUP);  // a key reload under load
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Idle again: nothing running, waiting or swapped; every block free.
  std::string metrics;
  for (int tries = 0; tries < 200; ++tries) {
    metrics = MetricsText();
    if (Metric(metrics, "kvserve_num_requests_running") == 0 && Metric(metrics, "kvserve_num_requests_waiting") == 0 &&
        Metric(metrics, "kvserve_num_requests_swapped") == 0 &&
        Metric(metrics, "kvserve_kv_cache_blocks", "state=\"used\"") == 0)
      break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  // Connection threads and sockets wind down once the clients are gone.
  ProcStats after = ReadProc(server_->pid());
  // The HTTP connection pool shrinks back after the burst (idle threads beyond 2 exit after
  // 5 s, server/http/worker_pool.h), so the thread count returns to the baseline; the slack is
  // for gRPC's pollers, which its own policy keeps between a minimum and a maximum.
  const int thread_bound = baseline.threads + 6;
  const int fd_bound = baseline.fds + 4;
  for (int tries = 0; tries < 150 && (after.fds > fd_bound || after.threads > thread_bound); ++tries) {
    std::this_thread::sleep_for(milliseconds(200));
    after = ReadProc(server_->pid());
  }
  const double preemptions = Metric(metrics, "kvserve_num_preemptions_total") - preempt_before;

  std::printf("[ soak ] %d requests in %.1f s: %d completed, %d clean errors, %d malformed -> 4xx, %d disconnects, "
              "%d slow readers, %d probes; %d HTTP, %d gRPC, %d with compression; %.0f preemptions\n",
              total, seconds, t.completed.load(), t.clean_errors.load(), t.malformed_4xx.load(), t.disconnects.load(),
              t.slow_ok.load(), t.probes.load(), t.http.load(), t.grpc.load(), t.compressed.load(), preemptions);
  std::printf("[ soak ] fds %d -> %d, threads %d -> %d (%s), RSS %ld -> %ld KiB\n", baseline.fds, after.fds,
              baseline.threads, after.threads, ThreadNames(server_->pid()).c_str(), baseline.rss_kb, after.rss_kb);
  for (const auto& [reason, count] : t.error_reasons) std::printf("[ soak ] clean error %s: %d\n", reason.c_str(), count);

  for (size_t k = 0; k < t.failures.size() && k < 20; ++k) ADD_FAILURE() << t.failures[k];
  EXPECT_TRUE(t.failures.empty()) << t.failures.size() << " failures";
  EXPECT_GT(t.completed.load(), total * 7 / 10);
  EXPECT_GT(t.probes.load(), 0);
  EXPECT_GT(preemptions, 0) << "the KV pool was meant to force preemption";
  EXPECT_EQ(Metric(metrics, "kvserve_num_requests_running"), 0);
  EXPECT_EQ(Metric(metrics, "kvserve_num_requests_waiting"), 0);
  EXPECT_EQ(Metric(metrics, "kvserve_num_requests_swapped"), 0);
  EXPECT_EQ(Metric(metrics, "kvserve_kv_cache_blocks", "state=\"used\""), 0) << "KV blocks leaked";
  EXPECT_EQ(Metric(metrics, "kvserve_kv_host_swap_blocks", "state=\"used\""), 0) << "swap blocks leaked";
  EXPECT_LE(after.fds, fd_bound) << "file descriptors leaked";
  EXPECT_LE(after.threads, thread_bound) << "threads leaked: " << ThreadNames(server_->pid());
  EXPECT_LT(after.rss_kb, baseline.rss_kb + 256 * 1024) << "RSS grew by more than 256 MiB";
  EXPECT_NE(server_->stderr_text().find("SIGHUP: API keys reloaded"), std::string::npos)
      << "the mid-run SIGHUP was not handled";
  // Still serving, and a clean stop.
  auto health = Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  server_->Signal(SIGTERM);
  EXPECT_EQ(server_->WaitExit(milliseconds(30000)), 0);
}

}  // namespace
}  // namespace kvserve::server::testing
