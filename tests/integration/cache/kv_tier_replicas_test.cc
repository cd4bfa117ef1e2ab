// The tiered prefix cache as users run it: a real redis-server (Debian package) on 127.0.0.1
// and a free port, and two `kvserve serve` processes sharing it (bundled kvs-tiny model, real
// HTTP). A long prompt served by the first replica is a prefix hit on the second (its metrics
// and usage.prompt_tokens_details.cached_tokens) with the same output; a host-tier hit within
// one replica the same way; a different cache_salt never shares; then Redis is killed in the
// middle of a burst of requests, both replicas keep serving without a failed request, and
// they reconnect when it returns. A second test configures tenants: two tenants in different
// prefix-cache groups never share a block through Redis, two in the same group do. Only the
// processes started here are signalled.
#include <httplib.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/integration/cache/redis_process.h"
#include "tests/integration/server/server_process.h"

namespace kvserve::cache {
namespace {

using json = nlohmann::json;
using server::testing::ServerProcess;
using server::testing::WriteTempFile;
using testing::FreePort;
using testing::RedisInteger;
using testing::RedisProcess;

constexpr int kBlock = 16;

uint64_t BytesPerBlock() {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny/config.json");
  json c = json::parse(in);
  const int layers = c["num_hidden_layers"];
  const int heads = c["num_attention_heads"];
  const int kv_heads = c.value("num_key_value_heads", heads);
  const int head_dim = c.value("head_dim", static_cast<int>(c["hidden_size"]) / heads);
  return static_cast<uint64_t>(layers) * 2 * kv_heads * kBlock * head_dim * sizeof(float);
}

std::vector<int> Prompt(int len, int salt) {
  std::vector<int> p;
  for (int i = 0; i < len; ++i) p.push_back(5 + (i * 131 + salt * 977) % 1900);
  return p;
}

struct Completion {
  int status = 0;
  std::string text;
  int64_t cached = -1;
  std::string body;
};

class Replica {
 public:
  // `tenants`: the config's tenants array (null: no tenants, the server is open).
  Replica(int redis_port, const std::string& name, const json& tenants = nullptr) {
    const uint64_t bpb = BytesPerBlock();
    json cfg = {
        {"model", {{"max_model_len", 2048}}},
        {"engine", {{"threads", 1}}},
        {"server", {{"host", "127.0.0.1"}, {"http_port", 0}, {"grpc_port", 0}}},
        {"cache",
         {{"kv_bytes", 96 * bpb},
          {"host_swap_bytes", 0},
          {"host_cache_bytes", 256 * bpb},
          {"remote_kv_url", "redis://127.0.0.1:" + std::to_string(redis_port)},
          {"remote_kv_timeout_seconds", 0.5}}},
    };
    if (!tenants.is_null()) cfg["tenants"] = tenants;
    std::string error;
    proc_ = ServerProcess::Start({KVSERVE_BIN, "serve", "--config", WriteTempFile(name + ".json", cfg.dump())},
                                 std::chrono::milliseconds(120000), &error);
    EXPECT_NE(proc_, nullptr) << error;
  }
  bool ok() const { return proc_ != nullptr; }
  std::string stderr_text() const { return proc_ ? proc_->stderr_text() : ""; }

  Completion Complete(const std::vector<int>& prompt, const std::string& cache_salt = "",
                      const std::string& api_key = "") {
    json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
    if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
    httplib::Client c(proc_->host(), proc_->http_port());
    c.set_read_timeout(120, 0);
    if (!api_key.empty()) c.set_bearer_token_auth(api_key);
    Completion out;
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    if (!res) return out;
    out.status = res->status;
    out.body = res->body;
    json j = json::parse(res->body, nullptr, false);
    if (res->status == 200 && j.is_object()) {
      out.text = j["choices"][0]["text"];
      out.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
    }
    return out;
  }

  // Sum of the samples of `name` whose labels contain `label` (e.g. tier="remote").
  double Metric(const std::string& name, const std::string& label = "", const std::string& api_key = "") {
    httplib::Client c(proc_->host(), proc_->http_port());
    if (!api_key.empty()) c.set_bearer_token_auth(api_key);
    auto res = c.Get("/metrics");
    if (!res || res->status != 200) return -1;
    std::istringstream lines(res->body);
    std::string line;
    double sum = 0;
    while (std::getline(lines, line)) {
      if (!line.starts_with(name + "{") && !line.starts_with(name + " ")) continue;
      if (!label.empty() && line.find(label) == std::string::npos) continue;
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
  }

 private:
  std::unique_ptr<ServerProcess> proc_;
};

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

TEST(KvTierReplicas, SharePrefixesThroughRedisAndSurviveItsOutage) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  RedisProcess redis(port);
  ASSERT_TRUE(redis.ready()) << "redis-server did not start (tools/setup.sh installs it)";
  Replica a(port, "a"), b(port, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor([&] { return a.Metric("kvserve_kv_tier_remote_up") == 1; }, std::chrono::seconds(10)))
      << a.stderr_text();

  // 1. A long prompt on replica a (cold), published write-through.
  const std::vector<int> shared = Prompt(600, 1);
  const int64_t hit_tokens = (600 - 1) / kBlock * kBlock;  // 592: the last token is computed
  const Completion cold = a.Complete(shared);
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(cold.cached, 0);
  ASSERT_TRUE(WaitFor([&] { return RedisInteger(port, "DBSIZE") >= hit_tokens / kBlock; }, std::chrono::seconds(10)))
      << "blocks never reached redis: DBSIZE=" << RedisInteger(port, "DBSIZE") << "\n" << a.stderr_text();

  // 2. The same prompt on replica b: a remote-tier hit with the same output.
  const Completion remote = b.Complete(shared);
  ASSERT_EQ(remote.status, 200) << remote.body;
  EXPECT_EQ(remote.text, cold.text) << "a remote-tier hit must give the cold run's output";
  EXPECT_EQ(remote.cached, hit_tokens);
  EXPECT_EQ(b.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"remote\""), hit_tokens / kBlock);
  EXPECT_EQ(b.Metric("kvserve_kv_tier_hit_tokens_total", "tier=\"remote\""), hit_tokens);
  EXPECT_GT(b.Metric("kvserve_kv_tier_read_bytes_total", "tier=\"remote\""), 0);
  EXPECT_GT(b.Metric("kvserve_kv_tier_load_seconds_count"), 0);
  EXPECT_EQ(b.Metric("kvserve_kv_tier_errors_total", "kind=\"rejected\""), 0);

  // 3. Another tenant salt never shares those blocks (locally or through redis).
  const Completion salted = b.Complete(shared, "other-tenant");
  ASSERT_EQ(salted.status, 200) << salted.body;
  EXPECT_EQ(salted.cached, 0);
  EXPECT_EQ(salted.text, cold.text);

  // 4. Host tier within replica a: two long prompts push the shared blocks out of its pool
  //    (96 blocks) into the host tier; the shared prompt then loads from there.
  const double host_hits_before = a.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"host\"");
  ASSERT_EQ(a.Complete(Prompt(700, 2)).status, 200);
  ASSERT_EQ(a.Complete(Prompt(700, 3)).status, 200);
  const Completion host = a.Complete(shared);
  ASSERT_EQ(host.status, 200) << host.body;
  EXPECT_EQ(host.text, cold.text) << "a host-tier hit must give the cold run's output";
  EXPECT_EQ(host.cached, hit_tokens);
  EXPECT_GE(a.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"host\"") - host_hits_before, 1)
      << "the shared prompt was not served from the host tier";
  EXPECT_GT(a.Metric("kvserve_kv_tier_written_bytes_total", "tier=\"host\""), 0);

  // 5. Redis dies in the middle of a burst: every request still succeeds on both replicas.
  std::atomic<int> failed{0}, done{0};
  std::vector<std::thread> burst;
  for (int i = 0; i < 8; ++i) {
    burst.emplace_back([&, i] {
      Replica& r = (i % 2) ? b : a;
      for (int k = 0; k < 2; ++k) {
        const Completion c = r.Complete(Prompt(300, 100 + i * 10 + k));
        if (c.status != 200) ++failed;
        ++done;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  redis.Kill();
  for (auto& t : burst) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(done.load(), 16);
  // While it is down: still served (local tiers only), without waiting for the dead tier.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.Complete(Prompt(300, 500 + i)).status, 200);
    EXPECT_EQ(b.Complete(Prompt(300, 600 + i)).status, 200);
  }
  EXPECT_EQ(a.Complete(shared).text, cold.text);
  EXPECT_GT(a.Metric("kvserve_kv_tier_errors_total", "tier=\"remote\"") +
                b.Metric("kvserve_kv_tier_errors_total", "tier=\"remote\""),
            0);
  EXPECT_TRUE(WaitFor([&] { return a.Metric("kvserve_kv_tier_remote_up") == 0; }, std::chrono::seconds(5)));

  // 6. Redis returns (empty): both replicas reconnect and share again.
  redis.Start();
  ASSERT_TRUE(redis.ready());
  EXPECT_TRUE(WaitFor([&] { return a.Metric("kvserve_kv_tier_remote_up") == 1; }, std::chrono::seconds(30)))
      << a.stderr_text();
  EXPECT_TRUE(WaitFor([&] { return b.Metric("kvserve_kv_tier_remote_up") == 1; }, std::chrono::seconds(30)))
      << b.stderr_text();
  const std::vector<int> fresh = Prompt(400, 9);
  const Completion fresh_a = a.Complete(fresh);
  ASSERT_EQ(fresh_a.status, 200);
  ASSERT_TRUE(WaitFor([&] { return RedisInteger(port, "DBSIZE") >= 399 / kBlock; }, std::chrono::seconds(10)));
  const double remote_before = b.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"remote\"");
  const Completion fresh_b = b.Complete(fresh);
  EXPECT_EQ(fresh_b.text, fresh_a.text);
  EXPECT_EQ(fresh_b.cached, 399 / kBlock * kBlock);
  EXPECT_EQ(b.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"remote\"") - remote_before, 399 / kBlock);
  if (HasFailure()) std::cerr << "replica a:\n" << a.stderr_text() << "\nreplica b:\n" << b.stderr_text();
}

// Tenants in different prefix-cache groups never share a block, not even through Redis; a
// tenant configured into another's group does. The remote hit metric tells a Redis hit from
// a recompute; cached_tokens tells what the client sees.
TEST(KvTierReplicas, TenantsShareThroughRedisOnlyWithinTheirPrefixCacheGroup) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  RedisProcess redis(port);
  ASSERT_TRUE(redis.ready()) << "redis-server did not start (tools/setup.sh installs it)";
  const json tenants = json::array({
      {{"name", "acme"}, {"api_keys", {"key-acme"}}},
      {{"name", "globex"}, {"api_keys", {"key-globex"}}},
      {{"name", "initech"}, {"api_keys", {"key-initech"}}},
      {{"name", "acme-eu"}, {"api_keys", {"key-acme-eu"}}, {"prefix_cache_group", "acme"}},
  });
  Replica a(port, "tenants-a", tenants), b(port, "tenants-b", tenants);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor([&] { return a.Metric("kvserve_kv_tier_remote_up", "", "key-acme") == 1 &&
                                   b.Metric("kvserve_kv_tier_remote_up", "", "key-acme") == 1; },
                      std::chrono::seconds(10)))
      << a.stderr_text();
  const std::vector<int> prompt = Prompt(480, 7);
  const int64_t hit_tokens = (480 - 1) / kBlock * kBlock;

  // acme's prompt on replica a, published to Redis.
  const Completion cold = a.Complete(prompt, "", "key-acme");
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(cold.cached, 0);
  ASSERT_TRUE(WaitFor([&] { return RedisInteger(port, "DBSIZE") >= hit_tokens / kBlock; }, std::chrono::seconds(10)))
      << "blocks never reached redis: DBSIZE=" << RedisInteger(port, "DBSIZE");
  const auto remote_hits = [&] { return b.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"remote\"", "key-acme"); };

  // globex, another group, sends the same tokens to replica b: computed from scratch, no
  // Redis hit. (Its own blocks are then published under globex's group, so the local check on
  // replica a uses a third group, initech.)
  const Completion other = b.Complete(prompt, "", "key-globex");
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(other.cached, 0) << "globex must not reuse acme's blocks";
  EXPECT_EQ(remote_hits(), 0);
  EXPECT_EQ(other.text, cold.text);
  // initech on replica a, where acme's blocks sit in the local pool: not shared either.
  const Completion other_local = a.Complete(prompt, "", "key-initech");
  ASSERT_EQ(other_local.status, 200) << other_local.body;
  EXPECT_EQ(other_local.cached, 0) << "initech must not reuse acme's local blocks";
  EXPECT_EQ(a.Metric("kvserve_kv_tier_hit_blocks_total", "tier=\"remote\"", "key-acme"), 0);

  // acme-eu is configured into acme's group: a Redis hit on replica b.
  const Completion same_group = b.Complete(prompt, "", "key-acme-eu");
  ASSERT_EQ(same_group.status, 200) << same_group.body;
  EXPECT_EQ(same_group.cached, hit_tokens);
  EXPECT_EQ(remote_hits(), hit_tokens / kBlock);
  EXPECT_EQ(same_group.text, cold.text);
  if (HasFailure()) std::cerr << "replica a:\n" << a.stderr_text() << "\nreplica b:\n" << b.stderr_text();
}

}  // namespace
}  // namespace kvserve::cache
