#include "server/server_app.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/openai/lora_routes.h"
#include "server/openai/openai_routes.h"
#include "server/openai/responses_routes.h"

namespace kvserve::server {

ServerApp::ServerApp(ServerAppOptions options, ServerAppDeps deps)
    : options_(std::move(options)), deps_(std::move(deps)) {
  KVS_CHECK(deps_.engine != nullptr && deps_.codec != nullptr && deps_.clock != nullptr &&
            deps_.wall_clock != nullptr);
  FrontendOptions fo;
  fo.model_name = options_.model_name;
  fo.max_model_len = deps_.engine->max_model_len();
  fo.limits = options_.server.limits;
  fo.embedding = options_.server.embedding;
  fo.created_unix = deps_.wall_clock->now_ns() / 1'000'000'000;
  fo.version = options_.version;
  fo.chat_formats = options_.chat_formats;
  fo.id_seed = options_.id_seed;
  Authenticator auth(options_.tenants);
  if (auth.open()) {
    deps_.logger.warn("no API keys configured: the server is open to anyone who can reach %s",
                      options_.server.host);
  }
  auto limiter = std::make_unique<TenantRateLimiter>(
      options_.tenants, deps_.rate_limit_clock != nullptr ? *deps_.rate_limit_clock : *deps_.clock,
      options_.on_rate_limit);
  if (!limiter->any()) limiter.reset();
  frontend_ = std::make_unique<Frontend>(*deps_.engine, *deps_.codec, std::move(auth), std::move(fo),
                                         deps_.logger.child("frontend"), std::move(limiter));

  HttpServerOptions ho;
  ho.host = options_.server.host;
  ho.port = options_.server.http_port;
  ho.max_body_bytes = options_.server.max_body_bytes;
  ho.max_connections = options_.server.http_max_connections;
  ho.request_timeout_seconds = options_.server.http_request_timeout_seconds;
  ho.tls_cert_path = options_.server.tls_cert_path;
  ho.tls_key_path = options_.server.tls_key_path;
  ho.tls_client_ca_path = options_.server.tls_client_ca_path;
  ho.on_response = options_.on_http_response;
  ho.error_response = [](int status, std::string message) {
    return ErrorResponse(MakeHttpError(status, std::move(message)));
  };
  http_ = std::make_unique<HttpServer>(std::move(ho), deps_.logger.child("http"));
  // One set of SSE intervals for the chat/completions and the Responses streams.
  SseLivenessOptions sse;
  sse.keepalive_interval = options_.keepalive_interval;
  OpenAiRoutesOptions ro;
  ro.sse = sse;
  ro.watch_connections = options_.watch_connections;
  ro.clock = deps_.clock;
  ro.wall_clock = deps_.wall_clock;
  ro.metrics_text = options_.metrics_text;
  if (!options_.server.metrics_api_key.empty()) ro.metrics_key.emplace(options_.server.metrics_api_key);
  RegisterOpenAiRoutes(*http_, *frontend_, std::move(ro));
  if (options_.lora.active()) {
    LoraRoutesOptions lo;
    if (!options_.lora.admin_api_key.empty()) lo.admin_key.emplace(options_.lora.admin_api_key);
    lo.open_server =
        std::none_of(options_.tenants.begin(), options_.tenants.end(),
                     [](const config::TenantConfig& t) { return !t.api_keys.empty(); });
    RegisterLoraRoutes(*http_, *frontend_, std::move(lo));
  }
  ResponsesRoutesOptions rso;  // /v1/responses (responses_routes.h)
  rso.sse = sse;
  rso.watch_connections = options_.watch_connections;
  rso.clock = deps_.clock;
  rso.wall_clock = deps_.wall_clock;
  rso.store.max_entries = options_.server.responses_store_max_entries;
  rso.store.ttl_ns = static_cast<base::Nanos>(options_.server.responses_store_ttl_seconds * 1e9);
  RegisterResponsesRoutes(*http_, *frontend_, std::move(rso));

  GrpcServerOptions go;
  go.host = options_.server.host;
  go.port = options_.server.grpc_port;
  go.max_message_bytes = options_.server.max_body_bytes;
  go.tls_cert_path = options_.server.tls_cert_path;
  go.tls_key_path = options_.server.tls_key_path;
  go.tls_client_ca_path = options_.server.tls_client_ca_path;
  go.on_status = options_.on_grpc_status;
  grpc_ = std::make_unique<GrpcServer>(*frontend_, std::move(go), deps_.logger.child("grpc"));
}

ServerApp::~ServerApp() { Stop(); }

absl::Status ServerApp::Start() {
  KVS_ASSIGN_OR_RETURN(http_port_, http_->Start());
  KVS_ASSIGN_OR_RETURN(grpc_port_, grpc_->Start());
  deps_.logger.info("serving model %s (max_model_len %d) on http=%s:%d grpc=%s:%d",
                    options_.model_name, frontend_->options().max_model_len, options_.server.host,
                    http_port_, options_.server.host, grpc_port_);
  return absl::OkStatus();
}

std::string ServerApp::ListeningLine() const {
  return absl::StrCat("kvserve listening http=", options_.server.host, ":", http_port_,
                      " grpc=", options_.server.host, ":", grpc_port_);
}

bool ServerApp::Idle() const {
  return frontend_->registry().size() == 0 && deps_.engine->InFlight() == 0;
}

void ServerApp::Drain(const std::function<bool(std::chrono::milliseconds)>& wait) {
  frontend_->StartDrain();
  deps_.engine->StartDrain();
  grpc_->SetServing(false);
  const auto timeout = std::chrono::duration<double>(options_.server.drain_timeout_seconds);
  const base::Nanos deadline =
      deps_.clock->now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  deps_.logger.info("draining: %d requests in flight, waiting up to %.1f s",
                    static_cast<int>(frontend_->registry().size()), timeout.count());
  bool interrupted = false;
  while (!Idle() && deps_.clock->now_ns() < deadline) {
    if (wait(std::chrono::milliseconds(20))) {
      interrupted = true;
      break;
    }
  }
  if (!Idle()) {
    deps_.logger.warn("drain %s: aborting %d requests still in flight",
                      interrupted ? "interrupted" : "timed out",
                      static_cast<int>(frontend_->registry().size()));
    deps_.engine->AbortAll();
    frontend_->registry().AbortAll();
    frontend_->registry().WaitEmpty(options_.abort_grace);
  }
  Stop();
  deps_.logger.info("drained");
}

void ServerApp::Stop() {
  if (http_) http_->Stop();
  if (grpc_) grpc_->Shutdown(std::chrono::milliseconds(500));
}

}  // namespace kvserve::server
