// The front ends' response hooks wired to PrometheusMetrics as `kvserve serve` wires them:
// a real ServerApp on 127.0.0.1 (fake engine), real HTTP and gRPC clients, and the counts
// read back from GET /metrics.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "server/core/wall_clock.h"
#include "server/grpc/grpc_status_interceptor.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/server_app.h"
#include "tests/unit/server/exposition_parser.h"
#include "tests/unit/server/fake_engine.h"
#include "tests/unit/server/fake_text_codec.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

class EdgeMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PrometheusMetricsOptions mo;
    mo.model_name = kModelName;
    mo.tenants = {"alpha"};
    metrics_ = std::make_unique<PrometheusMetrics>(mo);
    engine_ = std::make_unique<FakeEngine>();
    ServerAppOptions o;
    o.server.host = "127.0.0.1";
    o.server.http_port = 0;
    o.server.grpc_port = 0;
    o.tenants = {MakeTenant("alpha", {"sk-alpha"})};
    o.model_name = kModelName;
    o.metrics_text = [this] { return metrics_->ExpositionText(); };
    o.on_http_response = [this](std::string_view route, int status) { metrics_->OnHttpResponse(route, status); };
    o.on_grpc_status = [this](std::string_view method, int code) { metrics_->OnGrpcStatus(method, code); };
    ServerAppDeps deps;
    deps.engine = engine_.get();
    deps.codec = &codec_;
    deps.clock = &clock_;
    deps.wall_clock = &wall_clock_;
    app_ = std::make_unique<ServerApp>(std::move(o), std::move(deps));
    ASSERT_TRUE(app_->Start().ok());
  }
  void TearDown() override {
    app_->Stop();
    app_.reset();
  }

  httplib::Client Http() {
    httplib::Client c("127.0.0.1", app_->http_port());
    c.set_read_timeout(10, 0);
    return c;
  }
  // The hooks run after a response was written, so the client may see it first: poll.
  std::optional<double> WaitFor(const std::string& name, const std::map<std::string, std::string>& labels,
                                double want) {
    std::optional<double> got;
    for (int i = 0; i < 200; ++i) {
      std::string error;
      auto e = Exposition::Parse(metrics_->ExpositionText(), &error);
      got = e ? e->Sum(name, labels) : std::nullopt;
      if (got == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return got;
  }

  base::SteadyClock clock_;
  WallClock wall_clock_;
  FakeTextCodec codec_;
  std::unique_ptr<PrometheusMetrics> metrics_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<ServerApp> app_;
};

TEST_F(EdgeMetricsTest, HttpResponsesCountedByRouteAndCode) {
  auto c = Http();
  ASSERT_EQ(c.Get("/health")->status, 200);
  ASSERT_EQ(c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json")->status, 401);
  httplib::Headers key = {{"Authorization", "Bearer sk-alpha"}};
  ASSERT_EQ(c.Post("/v1/completions", key, R"({"prompt":"hi","max_tokens":2})", "application/json")->status, 200);
  ASSERT_EQ(c.Post("/v1/completions", key, R"({"prompt":"hi","max_tokens":-1})", "application/json")->status, 400);
  ASSERT_EQ(c.Get("/no/such/route/123")->status, 404);
  ASSERT_EQ(c.Get("/no/such/route/456")->status, 404);

  EXPECT_EQ(WaitFor("kvserve_http_requests_total", {{"route", "/health"}, {"code", "200"}}, 1), 1);
  EXPECT_EQ(WaitFor("kvserve_http_requests_total", {{"route", "/v1/completions"}, {"code", "401"}}, 1), 1);
  EXPECT_EQ(WaitFor("kvserve_http_requests_total", {{"route", "/v1/completions"}, {"code", "200"}}, 1), 1);
  EXPECT_EQ(WaitFor("kvserve_http_requests_total", {{"route", "/v1/completions"}, {"code", "400"}}, 1), 1);
  // Unknown paths share one label value: a scanner cannot blow up the series count.
  EXPECT_EQ(WaitFor("kvserve_http_requests_total", {{"route", "unmatched"}, {"code", "404"}}, 2), 2);

  // /metrics itself is served over HTTP with the exposition content type.
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  std::string error;
  auto e = Exposition::Parse(res->body, &error);
  ASSERT_TRUE(e.has_value()) << error;
  EXPECT_EQ(e->Type("kvserve_http_requests_total"), "counter");
}

TEST_F(EdgeMetricsTest, GrpcStatusesCountedByMethodAndCode) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", app_->grpc_port()), grpc::InsecureChannelCredentials());
  auto stub = v1::KvServe::NewStub(channel);
  {
    grpc::ClientContext ctx;
    v1::ListModelsResponse out;
    EXPECT_EQ(stub->ListModels(&ctx, v1::ListModelsRequest(), &out).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer sk-alpha");
    v1::ListModelsResponse out;
    EXPECT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &out).ok());
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer sk-alpha");
    v1::GenerateRequest req;
    req.set_prompt("hi");
    req.mutable_sampling()->set_max_tokens(3);
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateChunk chunk;
    while (reader->Read(&chunk)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(WaitFor("kvserve_grpc_requests_total",
                    {{"method", "/kvserve.v1.KvServe/ListModels"}, {"code", "UNAUTHENTICATED"}}, 1),
            1);
  EXPECT_EQ(WaitFor("kvserve_grpc_requests_total", {{"method", "/kvserve.v1.KvServe/ListModels"}, {"code", "OK"}}, 1),
            1);
  EXPECT_EQ(WaitFor("kvserve_grpc_requests_total", {{"method", "/kvserve.v1.KvServe/Generate"}, {"code", "OK"}}, 1),
            1);
}

TEST(GrpcMethodLabelTest, OnlyRegisteredMethodsBecomeLabels) {
  EXPECT_EQ(GrpcMethodLabel("/kvserve.v1.KvServe/Generate"), "/kvserve.v1.KvServe/Generate");
  EXPECT_EQ(GrpcMethodLabel("/grpc.health.v1.Health/Check"), "/grpc.health.v1.Health/Check");
  EXPECT_EQ(GrpcMethodLabel("/kvserve.v1.KvServe/Generate2"), "unknown");
  EXPECT_EQ(GrpcMethodLabel("/evil/x"), "unknown");
  EXPECT_EQ(GrpcMethodLabel(nullptr), "unknown");
}

}  // namespace
}  // namespace kvserve::server::testing
