// `kvserve serve` with pipeline parallelism 2 under `mpirun -np 2` (one thread per rank)
// against the same binary as one process, on random fixture checkpoints (dense Llama, Mixtral
// MoE, Gemma 3 with sliding-window layers) that carry the bundled model's tokenizer:
//  - greedy completions (text, tokens' logprobs and top logprobs) are bit-identical;
//  - each rank holds about half the weight bytes and exactly half the KV bytes per token
//    (the "stage memory" line every rank logs);
//  - killing the worker rank mid-stream fails the stream with an error event, and the job exits
//    non-zero within 30 s (mpirun SIGTERMs rank 0, whose step in flight then fails);
//  - rank 0 shutting down (SIGTERM) stops the worker cleanly: mpirun exits 0;
//  - a rank count other than tensor x pipeline, and parallel.tensor > 1, are refused by name.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/integration/server/server_process.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"

namespace kvserve::server::testing {
namespace {

// Under ASan (tools/sanitize.sh) OpenMPI keeps allocations from MPI_Init to exit by design: as
// for the parallel_mpi test (tests/unit/parallel/CMakeLists.txt), the ranks keep its plugins
// loaded and unwind slowly so that openmpi_lsan.supp can name those leaks by library; kvserve's
// own leaks are still reported. The ranks inherit this process's environment through mpirun.
// Without sanitizers the variables change nothing.
void PrepareMpiUnderSanitizers() {
  static const bool done = [] {
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
    auto append = [](const char* var, const std::string& more) {
      const char* old = std::getenv(var);
      if (old != nullptr) setenv(var, (std::string(old) + ":" + more).c_str(), 1);
    };
    append("ASAN_OPTIONS", "fast_unwind_on_malloc=0");
    append("LSAN_OPTIONS", std::string("suppressions=") + KVSERVE_SOURCE_DIR +
                               "/tests/unit/parallel/openmpi_lsan.supp");
    return true;
  }();
  (void)done;
}

using nlohmann::json;
using std::chrono::milliseconds;
namespace hf = kvserve::testing::hf;

const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog and then runs far away into the deep forest "
    "where nobody can find it again",
    "1 2 3 4 5",
    "Hello",
};

struct StageMemory {
  int begin = 0, end = 0;
  int64_t weights = 0, kv_per_token = 0;
};

// Every "stage memory: layers [b, e) of L, weights W bytes, KV K bytes per token" line.
std::vector<StageMemory> StageMemoryLines(const std::string& log) {
  static const std::regex re(
      R"(stage memory: layers \[(\d+), (\d+)\) of \d+, weights (\d+) bytes, KV (\d+) bytes per token)");
  std::vector<StageMemory> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back(
        {std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoll((*it)[3]), std::stoll((*it)[4])});
  }
  return out;
}

// The pid a rank logs ("pipeline stage S of P (pid N)"), -1 if absent.
pid_t StagePid(const std::string& log, int stage) {
  const std::regex re("pipeline stage " + std::to_string(stage) + R"( of \d+ \(pid (\d+)\))");
  std::smatch m;
  return std::regex_search(log, m, re) ? static_cast<pid_t>(std::stol(m[1])) : -1;
}

class PipelineServe : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    dir_ =
        ::testing::TempDir() + "/pipeline_serve_" + std::to_string(::getpid()) + "_" + GetParam();
    hf::FixtureSpec spec = GetParam() == "mixtral"  ? hf::MixtralPreset()
                           : GetParam() == "gemma3" ? hf::Gemma3Preset()
                                                    : hf::LlamaPreset();
    // The bundled tokenizer's vocabulary; layers large next to the (last stage's) lm_head,
    // so that halving the layers halves the weights.
    spec.vocab_size = 2048;
    if (GetParam() == "llama") {
      spec.hidden_size = 128;
      spec.intermediate_size = 512;
      spec.num_hidden_layers = 8;
      spec.head_dim = 32;
    } else if (GetParam() == "mixtral") {
      spec.num_hidden_layers = 4;
    }
    ASSERT_TRUE(hf::WriteRandomCheckpoint(spec, dir_).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny/" + f,
                                 dir_ + "/" + f, std::filesystem::copy_options::overwrite_existing);
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Config(int pipeline, int64_t kv_bytes = 8 << 20) const {
    json c = {
        {"logging", {{"level", "info"}}},
        {"model", {{"path", dir_}, {"max_model_len", 1024}}},
        {"engine", {{"threads", 1}, {"backend", "cpu"}}},
        {"cache", {{"kv_bytes", kv_bytes}, {"layer_groups", false}}},
        {"server",
         {{"host", "127.0.0.1"}, {"http_port", 0}, {"grpc_port", 0}, {"drain_timeout_seconds", 5}}},
        {"parallel", {{"pipeline", pipeline}}}};
    return c.dump();
  }

  std::unique_ptr<ServerProcess> Start(int pipeline, int64_t kv_bytes = 8 << 20) {
    std::vector<std::string> argv;
    if (pipeline > 1) {
      PrepareMpiUnderSanitizers();
      argv = {KVSERVE_MPIEXEC,
              "-np",
              std::to_string(pipeline),
              "--oversubscribe",
              "--allow-run-as-root",
              "--bind-to",
              "none",
              "--mca",
              "btl",
              "self,vader",
              "--mca",
              "btl_vader_single_copy_mechanism",
              "none",
              "--mca",
              "odls_base_sigkill_timeout",
              "5"};  // rank 0's time to fail streams
    }
    argv.insert(argv.end(), {KVSERVE_BIN, "serve", "--config",
                             WriteTempFile("kvserve.json", Config(pipeline, kv_bytes))});
    std::string error;
    auto server = ServerProcess::Start(argv, milliseconds(120000), &error);
    EXPECT_NE(server, nullptr) << error;
    return server;
  }

  static json Complete(ServerProcess& s, const json& body) {
    httplib::Client c(s.host(), s.http_port());
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    if (!r) return json{{"transport_error", static_cast<int>(r.error())}};
    json j = json::parse(r->body, nullptr, false);
    j["http_status"] = r->status;
    return j;
  }

  // Greedy completions of kPrompts: text and logprobs.
  static std::vector<json> Greedy(ServerProcess& s) {
    std::vector<json> out;
    for (const auto& p : kPrompts) {
      json r = Complete(s, {{"prompt", p},
                            {"max_tokens", 12},
                            {"temperature", 0},
                            {"logprobs", 3},
                            {"ignore_eos", true}});
      EXPECT_EQ(r.value("http_status", 0), 200) << r.dump();
      out.push_back(r.contains("choices") ? json{{"text", r["choices"][0]["text"]},
                                                 {"logprobs", r["choices"][0]["logprobs"]}}
                                          : r);
    }
    return out;
  }

  std::string dir_;
};

TEST_P(PipelineServe, TwoStagesMatchOneProcessAndHalveMemory) {
  auto one = Start(1);
  ASSERT_NE(one, nullptr);
  const std::vector<json> expected = Greedy(*one);
  one->Signal(SIGTERM);
  ASSERT_EQ(one->WaitExit(milliseconds(30000)), 0);
  const std::vector<StageMemory> whole = StageMemoryLines(one->stderr_text());
  ASSERT_EQ(whole.size(), 1u) << one->stderr_text();

  auto two = Start(2);
  ASSERT_NE(two, nullptr);
  const std::vector<json> got = Greedy(*two);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << "prompt " << i << ": " << kPrompts[i];
  }
  // A compression policy is refused by name (rank 0 holds only its layers' KV).
  json tri = Complete(*two, {{"prompt", kPrompts[0]},
                             {"max_tokens", 4},
                             {"temperature", 0},
                             {"kv_compression", {{"policy", "triattention"}}}});
  EXPECT_NE(tri.value("http_status", 0), 200) << tri.dump();
  EXPECT_NE(tri.dump().find("pipeline"), std::string::npos) << tri.dump();

  // Rank 0 stops on SIGTERM and releases the worker: a clean job.
  const std::string log_before = two->stderr_text();
  const pid_t rank0 = StagePid(log_before, 0);
  ASSERT_GT(rank0, 0) << log_before;
  ASSERT_EQ(::kill(rank0, SIGTERM), 0);
  EXPECT_EQ(two->WaitExit(milliseconds(30000)), 0) << two->stderr_text();
  const std::string log = two->stderr_text();
  EXPECT_NE(log.find("shutdown after"), std::string::npos) << log;

  std::vector<StageMemory> stages = StageMemoryLines(log);
  ASSERT_EQ(stages.size(), 2u) << log;
  std::sort(stages.begin(), stages.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  EXPECT_EQ(stages[0].begin, 0);
  EXPECT_EQ(stages[0].end, stages[1].begin);
  EXPECT_EQ(stages[1].end, whole[0].end);
  // KV: each rank holds its layers only, every layer the same bytes.
  EXPECT_EQ(stages[0].kv_per_token + stages[1].kv_per_token, whole[0].kv_per_token);
  EXPECT_EQ(2 * stages[0].kv_per_token, whole[0].kv_per_token);
  // Weights: the layers split in half; the last stage also holds the final norm and lm_head.
  EXPECT_EQ(stages[0].weights + stages[1].weights, whole[0].weights);
  for (const StageMemory& s : stages) {
    const double share = static_cast<double>(s.weights) / static_cast<double>(whole[0].weights);
    EXPECT_GT(share, 0.3) << "layers [" << s.begin << ", " << s.end << ")";
    EXPECT_LT(share, 0.7) << "layers [" << s.begin << ", " << s.end << ")";
  }
}

// Streams a long completion over a raw socket; kills `victim` once the first tokens arrived.
// Returns everything received until the server closed the connection (or 60 s passed).
std::string StreamAndKill(int port, pid_t victim) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "connect failed";
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string body = json{
      {"prompt", "Once upon a time"},
      {"max_tokens", 900},
      {"temperature", 0},
      {"ignore_eos", true},
      {"stream", true}}.dump();
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)!::write(fd, req.data(), req.size());
  std::string got;
  bool killed = false;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    if (!killed && got.find("data:") != std::string::npos) {
      ::kill(victim, SIGKILL);
      killed = true;
    }
  }
  ::close(fd);
  return got;
}

// Eight concurrent requests in a pool of 16 blocks (256 tokens): sequences are preempted and
// resumed (swap or recompute), with the KV moves carried to the worker in the step messages.
// Each request's greedy text equals one process's under the same pressure.
std::vector<std::string> ConcurrentTexts(ServerProcess& s) {
  std::vector<std::string> texts(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      json r = PipelineServe::Complete(
          s, {{"prompt", "Story " + std::to_string(i) + ": once upon a time there was"},
              {"max_tokens", 100},
              {"temperature", 0},
              {"ignore_eos", true}});
      texts[i] = r.contains("choices") ? r["choices"][0]["text"].get<std::string>() : r.dump();
    });
  }
  for (auto& t : threads) t.join();
  return texts;
}

int64_t Preemptions(ServerProcess& s) {
  httplib::Client c(s.host(), s.http_port());
  auto r = c.Get("/metrics");
  if (!r) return -1;
  static const std::regex re(R"(kvserve_num_preemptions_total\{[^}]*\} (\d+))");
  std::smatch m;
  return std::regex_search(r->body, m, re) ? std::stoll(m[1]) : -1;
}

// Pressure and the fault path, on one architecture (dense Llama).
class PipelineServeFault : public PipelineServe {};

TEST_P(PipelineServeFault, PreemptionUnderPressureKeepsTheTokens) {
  constexpr int64_t kSmallPool = 1 << 20;
  auto one = Start(1, kSmallPool);
  ASSERT_NE(one, nullptr);
  const std::vector<std::string> expected = ConcurrentTexts(*one);
  one->Signal(SIGTERM);
  ASSERT_EQ(one->WaitExit(milliseconds(30000)), 0);
  auto two = Start(2, kSmallPool);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(ConcurrentTexts(*two), expected);
  EXPECT_GT(Preemptions(*two), 0) << "the pool was not under pressure";
  const pid_t rank0 = StagePid(two->stderr_text(), 0);
  ASSERT_GT(rank0, 0);
  ::kill(rank0, SIGTERM);
  EXPECT_EQ(two->WaitExit(milliseconds(30000)), 0) << two->stderr_text();
}

TEST_P(PipelineServeFault, KillingTheWorkerFailsTheStreamAndTheJob) {
  auto two = Start(2);
  ASSERT_NE(two, nullptr);
  const pid_t worker = StagePid(two->stderr_text(), 1);
  ASSERT_GT(worker, 0) << two->stderr_text();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string stream = StreamAndKill(two->http_port(), worker);
  // Not a completed stream (900 tokens take far longer than the kill) but an error event.
  EXPECT_EQ(stream.find("\"finish_reason\":\"length\""), std::string::npos)
      << stream.substr(0, 2000);
  EXPECT_NE(stream.find("error"), std::string::npos)
      << stream.substr(stream.size() > 2000 ? stream.size() - 2000 : 0);
  // The model is unreachable, not broken: 503, as a load balancer retries elsewhere.
  EXPECT_NE(stream.find("\"code\":503"), std::string::npos)
      << stream.substr(stream.size() > 2000 ? stream.size() - 2000 : 0);
  // Rank 0 reports itself unhealthy while it drains (it may also have exited already).
  {
    httplib::Client http("127.0.0.1", two->http_port());
    http.set_connection_timeout(2, 0);
    if (auto health = http.Get("/health")) {
      EXPECT_EQ(health->status, 503) << health->body;
      std::cerr << "/health after the failure: " << health->status << " " << health->body << "\n";
    } else {
      std::cerr << "/health after the failure: rank 0 already gone\n";
    }
  }
  const std::optional<int> status = two->WaitExit(milliseconds(30000));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(status.has_value()) << "the job still runs " << seconds
                                  << " s after the worker died\n"
                                  << two->stderr_text();
  EXPECT_NE(*status, 0) << two->stderr_text();
  EXPECT_LT(seconds, 30.0);
  const std::string log = two->stderr_text();
  std::cerr << "stream after the kill (" << seconds << " s to exit " << *status << "):\n"
            << stream.substr(stream.size() > 600 ? stream.size() - 600 : 0) << "\nlog tail:\n"
            << log.substr(log.size() > 3000 ? log.size() - 3000 : 0) << "\n";
}

// Runs `command` (stderr into stdout); its exit status and output.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A rank count that is not tensor x pipeline, and tensor parallelism (not implemented yet),
// are refused on every rank by name, and the job fails.
TEST(PipelineServeConfig, RanksMustMatchTheSplit) {
  const std::string mpirun =
      std::string(KVSERVE_MPIEXEC) +
      " -np 2 --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader"
      " --mca btl_vader_single_copy_mechanism none " +
      KVSERVE_BIN + " serve --model " + KVSERVE_SOURCE_DIR +
      "/models/kvs-tiny --server.http_port 0 --server.grpc_port 0 "
      "--server.host 127.0.0.1 --engine.threads 1 ";
  auto [status, out] = RunCommand(mpirun + "--parallel.pipeline 3");
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("= 3 ranks, but mpirun started 2"), std::string::npos) << out;
  std::tie(status, out) = RunCommand(mpirun + "--parallel.tensor 2");
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("parallel.tensor=2: tensor parallelism is not implemented yet"),
            std::string::npos)
      << out;
}

INSTANTIATE_TEST_SUITE_P(Architectures, PipelineServe,
                         ::testing::Values("llama", "mixtral", "gemma3"));
INSTANTIATE_TEST_SUITE_P(Llama, PipelineServeFault, ::testing::Values("llama"));

}  // namespace
}  // namespace kvserve::server::testing
