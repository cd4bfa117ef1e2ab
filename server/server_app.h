// ServerApp: the serving process minus process plumbing. Composes the Frontend, the HTTP
// server (OpenAI routes) and the gRPC server over one engine, and runs the drain.
//
//   Start()  ─► both listeners bound ─► ListeningLine() "kvserve listening http=H:P grpc=H:P"
//   Drain()  ─► /ready 503, new requests 503 / UNAVAILABLE, gRPC health NOT_SERVING
//            ─► wait for in-flight requests, at most server.drain_timeout_seconds
//            ─► abort the rest (their streams end with finish_reason "abort"), let the
//               responses go out, then stop both listeners
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "base/clock.h"
#include "base/logger.h"
#include "config/config.h"
#include "engine/engine_factory.h"
#include "server/core/frontend.h"
#include "server/core/text_codec.h"

namespace kvserve::server {

class GrpcServer;
class HttpServer;

struct ServerAppOptions {
  config::ServerConfig server;
  std::vector<config::TenantConfig> tenants;
  std::string model_name;
  config::LoraConfig lora;         // lora.active(): the adapter admin endpoints (lora_routes.h)
  chat::ChatFormats chat_formats;  // resolved from model.* options and the chat template
  std::string version;
  uint64_t id_seed = 0;
  std::function<std::string()> metrics_text;  // /metrics body; null: empty exposition
  // Every HTTP response (route, status) and gRPC call end (method, code), for the metrics.
  std::function<void(std::string_view route, int status)> on_http_response;
  std::function<void(std::string_view method, int code)> on_grpc_status;
  // Every tenant rate-limit decision (tenant_rate_limiter.h), for the metrics; may be null.
  TenantRateLimiter::Observer on_rate_limit;
  std::chrono::milliseconds keepalive_interval{15000};  // SSE keep-alive (openai_routes.h)
  bool watch_connections = true;                        // see OpenAiRoutesOptions
  // After the drain timeout aborted what was left: how long the aborted responses get to
  // reach their clients before the listeners close.
  std::chrono::milliseconds abort_grace{2000};
};

struct ServerAppDeps {
  engine::ServingEngine* engine = nullptr;     // required; outlives the app
  const TextCodec* codec = nullptr;            // required; outlives the app
  const base::Clock* clock = nullptr;          // monotonic; required
  const base::Clock* wall_clock = nullptr;     // Unix epoch; required
  const base::Clock* rate_limit_clock = nullptr;  // refills the tenants' token buckets; null: clock
  base::Logger logger;
};

class ServerApp {
 public:
  ServerApp(ServerAppOptions options, ServerAppDeps deps);
  ~ServerApp();
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  // Binds both listeners. Errors name the port option to change.
  absl::Status Start();
  std::string ListeningLine() const;
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }

  // `wait(d)` sleeps up to d and returns true to cut the drain short (a second signal).
  void Drain(const std::function<bool(std::chrono::milliseconds)>& wait);
  // Closes both listeners (cuts whatever still runs). Idempotent.
  void Stop();

  // Replaces the tenants' API keys from a re-read configuration (SIGHUP): HTTP and gRPC
  // requests authenticate against the new keys from then on. Errors (tenants changed, no
  // key left) keep the old keys; see Authenticator::ReloadKeys.
  absl::Status ReloadKeys(const std::vector<config::TenantConfig>& tenants) { return frontend_->ReloadKeys(tenants); }

  Frontend& frontend() { return *frontend_; }

 private:
  bool Idle() const;

  ServerAppOptions options_;
  ServerAppDeps deps_;
  std::unique_ptr<Frontend> frontend_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<GrpcServer> grpc_;
  int http_port_ = 0;
  int grpc_port_ = 0;
};

}  // namespace kvserve::server
