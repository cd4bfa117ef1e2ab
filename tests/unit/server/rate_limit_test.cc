// Tenant rate limits end to end: a real ServerApp on 127.0.0.1 (fake engine) whose token
// buckets run on a FakeClock, real HTTP and gRPC clients, and the kvserve_rate_limit* series
// read back from the exposition. Tenant "alpha" is limited; "beta" shares the server and is
// never affected. Also the bucket and the header formats on their own.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "server/auth/token_bucket.h"
#include "server/core/wall_clock.h"
#include "server/errors/rate_limit_status.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/server_app.h"
#include "tests/unit/server/exposition_parser.h"
#include "tests/unit/server/fake_engine.h"
#include "tests/unit/server/fake_text_codec.h"
#include "tests/unit/server/http_test_client.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

constexpr base::Nanos kSecond = 1'000'000'000;
// "abc" is BOS + 3 bytes for the fake codec; max_tokens 4 makes the fake engine answer 4.
constexpr char kRequest[] = R"({"prompt": "abc", "max_tokens": 4, "temperature": 0})";

class RateLimitTest : public ::testing::Test {
 protected:
  void Start(config::TenantConfig alpha) {
    PrometheusMetricsOptions mo;
    mo.model_name = kModelName;
    mo.tenants = {"alpha", "beta"};
    metrics_ = std::make_unique<PrometheusMetrics>(mo);
    engine_ = std::make_unique<FakeEngine>();
    ServerAppOptions o;
    o.server.host = "127.0.0.1";
    o.server.http_port = 0;
    o.server.grpc_port = 0;
    o.tenants = {std::move(alpha), MakeTenant("beta", {"sk-beta"})};
    o.model_name = kModelName;
    o.on_rate_limit = [this](std::string_view tenant, const RateLimitState& state,
                             std::string_view refused_by) {
      metrics_->OnRateLimit(tenant, state, refused_by);
    };
    ServerAppDeps deps;
    deps.engine = engine_.get();
    deps.codec = &codec_;
    deps.clock = &clock_;
    deps.wall_clock = &wall_clock_;
    deps.rate_limit_clock = &bucket_clock_;
    app_ = std::make_unique<ServerApp>(std::move(o), std::move(deps));
    ASSERT_TRUE(app_->Start().ok());
  }
  void TearDown() override {
    if (app_) app_->Stop();
    app_.reset();
  }

  httplib::Result Post(const std::string& key, const std::string& body = kRequest) {
    httplib::Client c("127.0.0.1", app_->http_port());
    c.set_read_timeout(10, 0);
    return c.Post("/v1/completions", BearerHeaders(key), body, "application/json");
  }
  // gRPC Complete as `key`; fills the trailing metadata the server sent.
  grpc::Status Complete(const std::string& key, std::multimap<std::string, std::string>* trailers) {
    auto stub = v1::KvServe::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", app_->grpc_port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + key);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GenerateRequest req;
    req.set_prompt("abc");
    req.mutable_sampling()->set_max_tokens(4);
    v1::CompleteResponse resp;
    grpc::Status status = stub->Complete(&ctx, req, &resp);
    for (const auto& [k, v] : ctx.GetServerTrailingMetadata()) {
      trailers->emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    }
    return status;
  }
  std::optional<double> Metric(const std::string& name,
                               const std::map<std::string, std::string>& labels) {
    std::string error;
    auto e = Exposition::Parse(metrics_->ExpositionText(), &error);
    EXPECT_TRUE(e.has_value()) << error;
    return e ? e->Sum(name, labels) : std::nullopt;
  }

  base::SteadyClock clock_;
  base::FakeClock bucket_clock_;
  WallClock wall_clock_;
  FakeTextCodec codec_;
  std::unique_ptr<PrometheusMetrics> metrics_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<ServerApp> app_;
};

TEST_F(RateLimitTest, RequestsPerMinuteRefusesOneTenantOnly) {
  config::TenantConfig alpha = MakeTenant("alpha", {"sk-alpha"});
  alpha.requests_per_minute = 2;
  Start(std::move(alpha));

  for (int remaining : {1, 0}) {
    auto res = Post("sk-alpha");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->get_header_value("x-ratelimit-limit-requests"), "2");
    EXPECT_EQ(res->get_header_value("x-ratelimit-remaining-requests"), std::to_string(remaining));
    EXPECT_FALSE(res->has_header("x-ratelimit-limit-tokens")) << "no token limit configured";
  }
  auto refused = Post("sk-alpha");
  nlohmann::json e = ExpectOpenAiError(refused, 429);
  EXPECT_EQ(e["type"], "rate_limit_error");
  // One request refills in 60 s / 2; the bucket is full again after a minute.
  EXPECT_EQ(refused->get_header_value("Retry-After"), "30");
  EXPECT_EQ(refused->get_header_value("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(refused->get_header_value("x-ratelimit-reset-requests"), "1m0s");
  EXPECT_EQ(refused->get_header_value_count("Retry-After"), 1u);

  // The other tenant is not limited at all (and gets no x-ratelimit headers).
  for (int i = 0; i < 4; ++i) {
    auto res = Post("sk-beta");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_FALSE(res->has_header("x-ratelimit-limit-requests"));
  }

  std::multimap<std::string, std::string> trailers;
  grpc::Status status = Complete("sk-alpha", &trailers);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("retry after 30 s"), std::string::npos)
      << status.error_message();
  ASSERT_EQ(trailers.count("retry-after"), 1u);
  EXPECT_EQ(trailers.find("retry-after")->second, "30");
  EXPECT_EQ(trailers.find("x-ratelimit-limit-requests")->second, "2");
  trailers.clear();
  EXPECT_TRUE(Complete("sk-beta", &trailers).ok());

  // Half a minute later one request fits again; a streamed answer carries the headers too.
  bucket_clock_.advance_ns(30 * kSecond);
  auto again = Post("sk-alpha", R"({"prompt": "abc", "max_tokens": 4, "stream": true})");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(again->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(again->get_header_value("x-ratelimit-remaining-requests"), "0");

  EXPECT_EQ(
      Metric("kvserve_rate_limited_requests_total", {{"tenant", "alpha"}, {"limit", "requests"}}),
      2);
  EXPECT_EQ(Metric("kvserve_rate_limit_remaining", {{"tenant", "alpha"}, {"limit", "requests"}}),
            0);
  EXPECT_EQ(Metric("kvserve_rate_limit_limit", {{"tenant", "alpha"}, {"limit", "requests"}}), 2);
  EXPECT_EQ(Metric("kvserve_rate_limited_requests_total", {{"tenant", "beta"}}), std::nullopt);
  EXPECT_EQ(Metric("kvserve_rate_limit_remaining", {{"tenant", "beta"}}), std::nullopt);
}

TEST_F(RateLimitTest, TokensPerMinuteCountsInputAtAdmissionAndOutputAtTheEnd) {
  config::TenantConfig alpha = MakeTenant("alpha", {"sk-alpha"});
  alpha.tokens_per_minute = 20;
  Start(std::move(alpha));

  // Each request: 4 prompt tokens at admission (the header shows what is left then), 4 output
  // tokens when it ends: 20 -> 16 (12 after) -> 8 (4 after) -> 0 (-4 after: a debt).
  for (int remaining : {16, 8, 0}) {
    auto res = Post("sk-alpha");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const auto usage = nlohmann::json::parse(res->body)["usage"];
    ASSERT_EQ(usage["prompt_tokens"], 4);
    ASSERT_EQ(usage["completion_tokens"], 4);
    EXPECT_EQ(res->get_header_value("x-ratelimit-limit-tokens"), "20");
    EXPECT_EQ(res->get_header_value("x-ratelimit-remaining-tokens"), std::to_string(remaining));
    EXPECT_FALSE(res->has_header("x-ratelimit-limit-requests"));
  }
  // From -4 the next 4 input tokens need 8: 24 s at 20 per minute; full (24 missing) in 72 s.
  auto refused = Post("sk-alpha");
  ExpectOpenAiError(refused, 429);
  EXPECT_EQ(refused->get_header_value("Retry-After"), "24");
  EXPECT_EQ(refused->get_header_value("x-ratelimit-remaining-tokens"), "0");
  EXPECT_EQ(refused->get_header_value("x-ratelimit-reset-tokens"), "1m12s");

  std::multimap<std::string, std::string> trailers;
  grpc::Status status = Complete("sk-alpha", &trailers);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(trailers.count("retry-after"), 1u);
  EXPECT_EQ(trailers.find("retry-after")->second, "24");
  EXPECT_EQ(trailers.find("x-ratelimit-limit-tokens")->second, "20");

  // A prompt larger than the whole minute's allowance can never be admitted: a 400 naming it.
  auto too_big = Post("sk-alpha", R"({"prompt": "abcdefghijklmnopqrstuvwxyz", "max_tokens": 1})");
  EXPECT_EQ(ExpectOpenAiError(too_big, 400)["param"], "prompt");

  auto beta = Post("sk-beta");
  ASSERT_TRUE(beta);
  EXPECT_EQ(beta->status, 200) << beta->body;

  bucket_clock_.advance_ns(24 * kSecond);
  auto again = Post("sk-alpha");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;

  EXPECT_EQ(
      Metric("kvserve_rate_limited_requests_total", {{"tenant", "alpha"}, {"limit", "tokens"}}), 2);
  EXPECT_EQ(
      Metric("kvserve_rate_limited_requests_total", {{"tenant", "alpha"}, {"limit", "requests"}}),
      std::nullopt);
  EXPECT_EQ(Metric("kvserve_rate_limit_limit", {{"tenant", "alpha"}, {"limit", "tokens"}}), 20);
  EXPECT_EQ(Metric("kvserve_rate_limited_requests_total", {{"tenant", "beta"}}), std::nullopt);
}

TEST(TokenBucketTest, RefillsContinuouslyUpToCapacityAndCarriesDebt) {
  TokenBucket b(60, 0);  // one per second
  EXPECT_TRUE(b.CanTake(60, 0));
  EXPECT_FALSE(b.CanTake(61, 0));
  b.Take(70, 0);  // a debt of 10
  EXPECT_EQ(b.Level(0), -10);
  EXPECT_EQ(b.TimeUntil(1, 0), 11 * kSecond);
  EXPECT_EQ(b.Level(11 * kSecond), 1);
  EXPECT_EQ(b.TimeUntilFull(11 * kSecond), 59 * kSecond);
  EXPECT_EQ(b.Level(1000 * kSecond), 60) << "never above capacity";
  b.Take(-5, 1000 * kSecond);
  EXPECT_EQ(b.Level(1000 * kSecond), 60) << "giving back never overfills";
}

TEST(RateLimitStatusTest, HeadersAndPayloadRoundTrip) {
  EXPECT_EQ(FormatResetDuration(0), "0ms");
  EXPECT_EQ(FormatResetDuration(20'000'000), "20ms");
  EXPECT_EQ(FormatResetDuration(kSecond + 1), "2s");
  EXPECT_EQ(FormatResetDuration(3723 * kSecond), "1h2m3s");
  EXPECT_EQ(RetryAfterSeconds(1), 1);
  RateLimitState s;
  s.tokens = {100, 7, 3 * kSecond};
  s.retry_after_ns = 2 * kSecond;
  const absl::Status status = RateLimitedError("limited", s);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  auto back = RateLimitStateOf(status);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->tokens.remaining, 7);
  EXPECT_EQ(back->requests.limit, 0);
  const HeaderList headers = RateLimitHeaders(*back);
  ASSERT_EQ(headers.size(), 4u);  // retry-after + the three token headers
  EXPECT_EQ(headers[0], (std::pair<std::string, std::string>("retry-after", "2")));
  EXPECT_FALSE(RateLimitStateOf(absl::ResourceExhaustedError("queue full")).has_value());
}

}  // namespace
}  // namespace kvserve::server::testing
