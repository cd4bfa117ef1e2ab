// The observability stack end to end, with real components only: `kvserve serve` on the
// bundled model, the real Prometheus server scraping it every second, traffic with and
// without KV compression over HTTP and gRPC, then every PromQL expression of
// deploy/grafana/kvserve.json and deploy/prometheus/alerts.yml evaluated by Prometheus.
//
// What must hold:
//   - every expression evaluates without error (dashboard variables substituted the way
//     Grafana would: model = the served model, tenant/policy = All, $__rate_interval = 5m);
//   - the key panels return finite data;
//   - the alert rules load from deploy/prometheus/alerts.yml and evaluate healthy;
//   - evicted-token series are non-zero exactly for the compressing policies, and agree
//     with the per-request usage.kv_compression.evicted_tokens the responses reported.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <iostream>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tests/integration/observability/prometheus_process.h"
#include "tests/integration/server/server_process.h"
#include "tests/unit/server/http_test_client.h"

namespace kvserve::observability::testing {
namespace {

using nlohmann::json;
using server::testing::ServerProcess;
using server::testing::WriteTempFile;
using std::chrono::milliseconds;

constexpr char kModel[] = "kvs-tiny";
constexpr char kKvserveConfig[] = R"({
  "logging": {"level": "warn"},
  "engine": {"threads": 1},
  "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "drain_timeout_seconds": 1,
             "metrics_compat": "vllm"},
  "tenants": [
    {"name": "alpha", "api_keys": ["sk-alpha"]},
    {"name": "beta", "api_keys": ["sk-beta"]}
  ]
})";

// ~40 tokens, so that two requests with it share at least one full 16-token KV block.
constexpr char kPrompt[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep.";

// Request bodies for the compressing policies: small budgets and slack so that a request
// of ~40 prompt + 120 generated tokens runs several rounds.
const std::map<std::string, std::string>& CompressionSettings() {
  static const std::map<std::string, std::string> m = {
      {"triattention", R"({"policy": "triattention", "budget": 32, "divide_length": 16, "protect_prompt": false})"},
      {"streamingllm", R"({"policy": "streamingllm", "budget": 20, "sinks": 4, "divide_length": 16, "protect_prompt": false})"},
      {"h2o", R"({"policy": "h2o", "budget": 32, "divide_length": 16, "protect_prompt": false})"},
      {"snapkv", R"({"policy": "snapkv", "budget": 32, "window": 8, "divide_length": 16, "protect_prompt": false})"},
  };
  return m;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A PromQL expression of the dashboard with Grafana's variables replaced.
std::string Substitute(std::string expr) {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"$__rate_interval", "5m"}, {"${__rate_interval}", "5m"}, {"$__interval", "15s"}, {"$__range", "5m"},
      {"${model}", kModel},       {"$model", kModel},           {"${tenant}", ".*"},    {"$tenant", ".*"},
      {"${policy}", ".*"},        {"$policy", ".*"}};
  for (const auto& [from, to] : vars) {
    for (size_t pos = expr.find(from); pos != std::string::npos; pos = expr.find(from, pos + to.size())) {
      expr.replace(pos, from.size(), to);
    }
  }
  return expr;
}

struct PanelQuery {
  std::string panel;
  std::string expr;  // substituted
};

void CollectPanels(const json& panels, std::vector<PanelQuery>& out) {
  for (const auto& p : panels) {
    if (p.contains("panels")) CollectPanels(p["panels"], out);
    if (!p.contains("targets")) continue;
    for (const auto& t : p["targets"]) {
      if (t.contains("expr")) out.push_back({p.value("title", "?"), Substitute(t["expr"].get<std::string>())});
    }
  }
}

// Values of an instant-vector result; empty when there is none.
std::vector<std::pair<json, double>> Values(const json& response) {
  std::vector<std::pair<json, double>> out;
  if (response.value("status", "") != "success") return out;
  const json& data = response["data"];
  if (data.value("resultType", "") == "vector") {
    for (const auto& r : data["result"]) out.push_back({r["metric"], std::stod(r["value"][1].get<std::string>())});
  } else if (data.value("resultType", "") == "scalar") {
    out.push_back({json::object(), std::stod(data["result"][1].get<std::string>())});
  }
  return out;
}

std::map<std::string, double> ByLabel(const json& response, const std::string& label) {
  std::map<std::string, double> out;
  for (const auto& [metric, value] : Values(response)) out[metric.value(label, "")] = value;
  return out;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      if (kvserve_) std::cerr << "kvserve stderr:\n" << kvserve_->stderr_text() << "\n";
      if (prometheus_) std::cerr << "prometheus log:\n" << prometheus_->log() << "\n";
    }
  }

  httplib::Result Post(const std::string& path, const json& body, const std::string& key) {
    httplib::Client c(kvserve_->host(), kvserve_->http_port());
    c.set_read_timeout(120, 0);
    return c.Post(path.c_str(), server::testing::BearerHeaders(key), body.dump(), "application/json");
  }

  // A non-streaming completion that must succeed; returns usage.kv_compression.
  json Complete(const std::string& key, int max_tokens, const std::string& compression = "") {
    json body = {{"prompt", kPrompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
    if (!compression.empty()) body["kv_compression"] = json::parse(compression);
    auto res = Post("/v1/completions", body, key);
    if (!res) {
      ADD_FAILURE() << "no response from kvserve";
      return json();
    }
    if (res->status != 200) {
      ADD_FAILURE() << "kvserve refused a request with kv_compression " << (compression.empty() ? "(none)" : compression)
                    << ": HTTP " << res->status << " " << res->body
                    << (compression.empty() ? "" : "\n(does the engine serve compressing policies yet? issue 6)");
      return json();
    }
    json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("usage") || !j["usage"].contains("kv_compression")) {
      ADD_FAILURE() << "no usage.kv_compression in " << res->body;
      return json();
    }
    return j["usage"]["kv_compression"];
  }

  void StreamComplete(const std::string& key, int max_tokens) {
    json body = {{"prompt", "And God said, Let there be light"}, {"max_tokens", max_tokens}, {"stream", true}};
    auto res = Post("/v1/completions", body, key);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos) << res->body;
  }

  // Starts a long streaming completion on a raw socket, reads up to its first token and
  // hangs up: the server aborts the request (finished_reason "abort").
  void AbandonStream() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(kvserve_->http_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string body = R"({"prompt": "a", "max_tokens": 2000, "ignore_eos": true, "stream": true})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    std::string seen;
    char c;
    while (seen.find("data: ") == std::string::npos && recv(fd, &c, 1, 0) == 1) seen.push_back(c);
    close(fd);
    EXPECT_EQ(seen.rfind("HTTP/1.1 200", 0), 0u) << seen;
  }

  void GrpcGenerate() {
    auto channel = grpc::CreateChannel(kvserve_->grpc_target(), grpc::InsecureChannelCredentials());
    auto stub = v1::KvServe::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ctx.AddMetadata("authorization", "Bearer sk-beta");
    v1::GenerateRequest req;
    req.set_prompt("The LORD is my shepherd");
    req.mutable_sampling()->set_max_tokens(8);
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateChunk chunk;
    while (reader->Read(&chunk)) {
    }
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
  }

  // Polls Prometheus until `expr` returns a value >= `want` (the scrape after the traffic).
  double WaitForValue(const std::string& expr, double want, milliseconds timeout) {
    double got = -1;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto v = Values(prometheus_->Query(expr));
      if (!v.empty()) got = v[0].second;
      if (got >= want) return got;
      std::this_thread::sleep_for(milliseconds(250));
    }
    return got;
  }

  std::unique_ptr<ServerProcess> kvserve_;
  std::unique_ptr<PrometheusProcess> prometheus_;
};

TEST_F(ObservabilityTest, DashboardAndAlertQueriesEvaluateAgainstRealPrometheus) {
  // ---- kvserve
  std::string error;
  kvserve_ = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("kvserve.json", kKvserveConfig)},
                                  milliseconds(120000), &error);
  ASSERT_NE(kvserve_, nullptr) << error;

  // ---- Prometheus: 1 s scrapes and rule evaluations, the deployed alert rules.
  const std::string alerts_path = std::string(KVSERVE_SOURCE_DIR) + "/deploy/prometheus/alerts.yml";
  const std::string prom_config = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                  "rule_files:\n  - " + alerts_path + "\n"
                                  "scrape_configs:\n  - job_name: kvserve\n    metrics_path: /metrics\n"
                                  "    static_configs:\n      - targets: ['" + kvserve_->host() + ":" +
                                  std::to_string(kvserve_->http_port()) + "']\n";
  prometheus_ = PrometheusProcess::Start(KVSERVE_PROMETHEUS_BIN, prom_config, milliseconds(60000), &error);
  ASSERT_NE(prometheus_, nullptr) << error;
  ASSERT_GE(WaitForValue("up{job=\"kvserve\"}", 1, milliseconds(20000)), 1) << "Prometheus never scraped kvserve";

  // ---- traffic. Spread over several scrapes: a counter first scraped with its final value
  // has no rate, so every kind of request comes twice, a bit more than a scrape apart.
  std::map<std::string, int64_t> reported_evicted;  // policy -> sum of usage.kv_compression.evicted_tokens
  int finished = 0;
  for (int round = 0; round < 2; ++round) {
    json full = Complete("sk-alpha", 12);  // same prompt twice: a prefix-cache hit
    ++finished;
    if (!full.is_null()) {
      EXPECT_EQ(full.value("evicted_tokens", -1), 0) << full;
      reported_evicted["full"] += full.value("evicted_tokens", 0);
    }
    ASSERT_NO_FATAL_FAILURE(StreamComplete("sk-beta", 8));
    ++finished;
    ASSERT_NO_FATAL_FAILURE(GrpcGenerate());
    ++finished;
    for (const auto& [policy, settings] : CompressionSettings()) {
      json usage = Complete(round == 0 ? "sk-alpha" : "sk-beta", 120, settings);
      ++finished;
      if (usage.is_null()) continue;
      EXPECT_EQ(usage.value("policy", ""), policy) << usage;
      EXPECT_GT(usage.value("evicted_tokens", 0), 0) << policy << " evicted nothing: " << usage;
      reported_evicted[policy] += usage.value("evicted_tokens", 0);
    }
    // Errors by code: unauthenticated, unknown route, invalid request.
    auto c = httplib::Client(kvserve_->host(), kvserve_->http_port());
    EXPECT_EQ(c.Post("/v1/completions", "{}", "application/json")->status, 401);
    EXPECT_EQ(c.Get("/v1/no-such-route")->status, 404);
    EXPECT_EQ(Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", -3}}, "sk-alpha")->status, 400);
    std::this_thread::sleep_for(milliseconds(1500));
  }
  // Last: a client that leaves mid-stream. Nothing runs after its abort, so the gauges
  // below show the state the engine published after forgetting it.
  ASSERT_NO_FATAL_FAILURE(AbandonStream());
  ++finished;
  ASSERT_FALSE(HasFailure()) << "the traffic phase failed; the queries below would only repeat it";

  // Everything the traffic did has been scraped once the finished-request count is complete.
  ASSERT_GE(WaitForValue("sum(kvserve_request_success_total)", finished, milliseconds(15000)), finished);
  std::this_thread::sleep_for(milliseconds(2500));  // rules evaluated on the final scrape

  // ---- every dashboard expression
  json dashboard = json::parse(ReadFile(std::string(KVSERVE_SOURCE_DIR) + "/deploy/grafana/kvserve.json"), nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded()) << "deploy/grafana/kvserve.json is not JSON";
  std::vector<PanelQuery> queries;
  CollectPanels(dashboard["panels"], queries);
  ASSERT_GE(queries.size(), 20u);
  // Panels that must show data after this traffic (a finite value in at least one series).
  const std::set<std::string> key_panels = {
      "Throughput (tokens/s)",     "Requests finished by reason (req/s)", "Scheduler queue",
      "Time to first token",       "End-to-end request latency",          "Inter-token latency",
      "KV pool usage",             "KV blocks",                           "Prefix cache hit rate",
      "Compression ratio by policy", "Evicted tokens rate",               "Evicted token position (p / t)",
      "Evicted token age (t - p)", "Compression rounds",                  "Per-tenant traffic (tokens/s)",
      "Per-tenant requests (req/s)", "HTTP responses by code",            "gRPC calls by code",
      "Live KV: logical vs held tokens", "Requests by policy (req/s)"};
  std::set<std::string> panels_with_data;
  for (const auto& q : queries) {
    SCOPED_TRACE("panel '" + q.panel + "': " + q.expr);
    EXPECT_EQ(q.expr.find('$'), std::string::npos) << "unsubstituted Grafana variable";
    json r = prometheus_->Query(q.expr);
    EXPECT_EQ(r.value("status", ""), "success") << r.dump();
    for (const auto& [metric, value] : Values(r)) {
      if (std::isfinite(value)) panels_with_data.insert(q.panel);
    }
  }
  for (const auto& p : key_panels) EXPECT_TRUE(panels_with_data.contains(p)) << "panel '" << p << "' shows no data";
  std::cout << "[observability] " << queries.size() << " dashboard queries evaluated, "
            << panels_with_data.size() << " panels with data\n";
  // The variables' label_values() queries must find their labels.
  for (const auto& v : dashboard["templating"]["list"]) {
    if (v.value("type", "") != "query") continue;
    const std::string def = v.value("definition", "");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(def, m, std::regex(R"(label_values\((.*),\s*(\w+)\))"))) << def;
    auto values = ByLabel(prometheus_->Query(Substitute(m[1])), m[2]);
    EXPECT_FALSE(values.empty()) << "variable " << v.value("name", "") << " would be empty: " << def;
  }

  // ---- every alert rule, as Prometheus loaded it from deploy/prometheus/alerts.yml
  json rules = prometheus_->Get("/api/v1/rules");
  ASSERT_EQ(rules.value("status", ""), "success") << rules.dump();
  const std::string alerts_text = ReadFile(alerts_path);
  size_t declared = 0;
  for (size_t pos = alerts_text.find("- alert:"); pos != std::string::npos; pos = alerts_text.find("- alert:", pos + 1)) {
    ++declared;
  }
  size_t loaded = 0;
  for (const auto& g : rules["data"]["groups"]) {
    for (const auto& rule : g["rules"]) {
      ++loaded;
      SCOPED_TRACE("alert " + rule.value("name", "") + ": " + rule.value("query", ""));
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
      json r = prometheus_->Query(rule["query"].get<std::string>());
      EXPECT_EQ(r.value("status", ""), "success") << r.dump();
    }
  }
  std::cout << "[observability] " << loaded << " alert rules loaded and evaluated\n";
  EXPECT_EQ(loaded, declared);
  EXPECT_GE(declared, 5u);
  // A healthy server fires nothing but possibly none of these.
  EXPECT_TRUE(Values(prometheus_->Query("ALERTS{alertname=\"KvserveDown\"}")).empty());

  // ---- compression: evictions exactly where a compressing policy ran, matching the usage
  auto evicted = ByLabel(prometheus_->Query("sum by (policy) (kvserve_kv_evicted_tokens_total{model=\"kvs-tiny\"})"), "policy");
  ASSERT_TRUE(evicted.contains("full")) << "the full policy exports its (zero) evicted-token series";
  for (const auto& [policy, value] : evicted) {
    std::cout << "[observability] evicted tokens " << policy << ": " << value << " (usage reported "
              << reported_evicted[policy] << ")\n";
    SCOPED_TRACE("policy " + policy);
    if (policy == "full") {
      EXPECT_EQ(value, 0);
    } else {
      EXPECT_TRUE(CompressionSettings().contains(policy));
      EXPECT_GT(value, 0);
    }
    EXPECT_EQ(value, static_cast<double>(reported_evicted[policy])) << "metrics disagree with usage.kv_compression";
  }
  for (const auto& [policy, settings] : CompressionSettings()) EXPECT_TRUE(evicted.contains(policy)) << policy;
  auto by_origin = ByLabel(prometheus_->Query("sum by (origin) (kvserve_kv_evicted_tokens_total{policy!=\"full\"})"), "origin");
  EXPECT_GT(by_origin["prompt"], 0) << "protect_prompt=false requests evicted no prompt token";
  EXPECT_GT(by_origin["generated"], 0);
  auto ratio = ByLabel(prometheus_->Query("sum by (policy) (kvserve_kv_compression_ratio_sum) / "
                                          "sum by (policy) (kvserve_kv_compression_ratio_count)"),
                       "policy");
  for (const auto& [policy, value] : ratio) std::cout << "[observability] mean compression ratio " << policy << ": " << value << "\n";
  EXPECT_EQ(ratio["full"], 1.0);
  EXPECT_GT(ratio["triattention"], 1.0);
  auto rounds = ByLabel(prometheus_->Query("sum by (policy) (kvserve_kv_compression_rounds_total)"), "policy");
  EXPECT_EQ(rounds["full"], 0);
  EXPECT_GT(rounds["triattention"], 0);

  // ---- serving basics and the vLLM names
  // The engine's last word, after the abort: nothing runs, no KV is held.
  EXPECT_EQ(WaitForValue("sum(kvserve_num_requests_running)", 0, milliseconds(1000)), 0) << "all requests finished";
  EXPECT_EQ(WaitForValue("sum(kvserve_kv_cache_usage_ratio)", 0, milliseconds(1000)), 0);
  EXPECT_EQ(WaitForValue("sum(kvserve_kv_live_logical_tokens)", 0, milliseconds(1000)), 0);
  EXPECT_EQ(WaitForValue("sum(kvserve_request_success_total{finished_reason=\"abort\"})", 1, milliseconds(1000)), 1);
  EXPECT_GT(WaitForValue("sum(kvserve_prefix_cache_hits_total)", 1, milliseconds(1000)), 0);
  EXPECT_EQ(WaitForValue("sum(kvserve_http_requests_total{code=\"404\",route=\"unmatched\"})", 2, milliseconds(1000)), 2);
  EXPECT_GE(WaitForValue("sum(kvserve_grpc_requests_total{code=\"OK\",method=\"/kvserve.v1.KvServe/Generate\"})", 2,
                         milliseconds(1000)),
            2);
  auto tenants = ByLabel(prometheus_->Query("sum by (tenant) (kvserve_request_success_total)"), "tenant");
  EXPECT_GT(tenants["alpha"], 0);
  EXPECT_GT(tenants["beta"], 0);
  for (const char* name : {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"}) {
    EXPECT_EQ(Values(prometheus_->Query(std::string(name) + "{model_name=\"kvs-tiny\"}")).size(), 1u) << name;
  }
  EXPECT_GE(WaitForValue("sum(vllm:request_success_total)", finished, milliseconds(1000)), finished);
}

}  // namespace
}  // namespace kvserve::observability::testing
