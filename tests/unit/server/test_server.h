// An in-process kvserve front end (HTTP + gRPC on 127.0.0.1, ephemeral ports) over a
// FakeEngine and FakeTextCodec: the real ServerApp, real sockets, a controllable engine.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "server/core/wall_clock.h"
#include "server/server_app.h"
#include "tests/unit/server/fake_engine.h"
#include "tests/unit/server/fake_text_codec.h"

namespace kvserve::server::testing {

inline constexpr char kModelName[] = "kvs-tiny";

struct TestServerOptions {
  FakeEngineOptions engine;
  std::vector<config::TenantConfig> tenants;
  uint64_t max_body_bytes = 1 << 20;
  double drain_timeout_seconds = 10.0;
  int http_max_connections = 512;
  bool watch_connections = true;
  std::string tls_cert_path, tls_key_path, tls_client_ca_path;  // TLS on both listeners when set
  std::string metrics_api_key;  // server.metrics_api_key
  chat::ChatFormats chat_formats;  // reasoning / tool-call formats (default: neither)
};

class TestServer {
 public:
  explicit TestServer(TestServerOptions options = {});
  ~TestServer();

  FakeEngine& engine() { return *engine_; }
  ServerApp& app() { return *app_; }
  int http_port() const { return app_->http_port(); }
  std::string grpc_target() const;

 private:
  base::SteadyClock clock_;
  WallClock wall_clock_;
  FakeTextCodec codec_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<ServerApp> app_;
};

config::TenantConfig MakeTenant(std::string name, std::vector<std::string> api_keys);

}  // namespace kvserve::server::testing
