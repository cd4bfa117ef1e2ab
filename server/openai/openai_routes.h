// The OpenAI-compatible HTTP surface on an HttpServer, over a Frontend:
//   POST /v1/completions  POST /v1/chat/completions  GET /v1/models
//   POST /tokenize  POST /detokenize            (API key required when keys are configured)
//   GET /health  GET /ready  GET /version                (public)
//   GET /metrics   (public, or only with server.metrics_api_key when that is set)
// Streaming responses are SSE. A client that hangs up while its request generates (streaming
// or not) is noticed on its socket at once and the request is aborted in the engine.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "base/clock.h"
#include "server/auth/auth.h"
#include "server/core/frontend.h"
#include "server/errors/error_mapping.h"
#include "server/http/http_server.h"
#include "server/openai/sse_liveness.h"

namespace kvserve::server {

struct OpenAiRoutesOptions {
  // Keep-alive and liveness-probe intervals of streams (shared with /v1/responses).
  SseLivenessOptions sse;
  bool watch_connections = true;  // false: always probe (tests of the fallback)
  const base::Clock* clock = nullptr;       // monotonic; required
  const base::Clock* wall_clock = nullptr;  // Unix epoch ("created"); required
  // Prometheus text exposition for /metrics; null: an empty (valid) exposition.
  std::function<std::string()> metrics_text;
  // server.metrics_api_key: when set, /metrics answers 401 without exactly this key.
  std::optional<BearerKey> metrics_key;
};

void RegisterOpenAiRoutes(HttpServer& http, Frontend& frontend, OpenAiRoutesOptions options);

// An OpenAI error response (also used for errors raised by the HTTP layer itself).
HttpResponse ErrorResponse(const HttpError& error);

}  // namespace kvserve::server
