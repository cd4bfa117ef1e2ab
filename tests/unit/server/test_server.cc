#include "tests/unit/server/test_server.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::server::testing {

TestServer::TestServer(TestServerOptions options)
    : engine_(std::make_unique<FakeEngine>(options.engine)) {
  ServerAppOptions o;
  o.server.host = "127.0.0.1";
  o.server.http_port = 0;
  o.server.grpc_port = 0;
  o.server.max_body_bytes = options.max_body_bytes;
  o.server.drain_timeout_seconds = options.drain_timeout_seconds;
  o.server.http_max_connections = options.http_max_connections;
  o.server.tls_cert_path = options.tls_cert_path;
  o.server.tls_key_path = options.tls_key_path;
  o.server.tls_client_ca_path = options.tls_client_ca_path;
  o.server.metrics_api_key = options.metrics_api_key;
  o.tenants = std::move(options.tenants);
  o.watch_connections = options.watch_connections;
  o.chat_formats = options.chat_formats;
  o.model_name = kModelName;
  o.version = "0.1.0-test";
  o.id_seed = 1234;
  o.metrics_text = [] { return std::string("# TYPE kvserve_test_up gauge\nkvserve_test_up 1\n"); };
  ServerAppDeps deps;
  deps.engine = engine_.get();
  deps.codec = &codec_;
  deps.clock = &clock_;
  deps.wall_clock = &wall_clock_;
  app_ = std::make_unique<ServerApp>(std::move(o), std::move(deps));
  absl::Status st = app_->Start();
  KVS_CHECK(st.ok(), st.ToString());
}

TestServer::~TestServer() {
  app_->Stop();
  app_.reset();
  engine_.reset();
}

std::string TestServer::grpc_target() const { return absl::StrCat("127.0.0.1:", app_->grpc_port()); }

config::TenantConfig MakeTenant(std::string name, std::vector<std::string> api_keys) {
  config::TenantConfig t;
  t.name = std::move(name);
  t.api_keys = std::move(api_keys);
  return t;
}

}  // namespace kvserve::server::testing
