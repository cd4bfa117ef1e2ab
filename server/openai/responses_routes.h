// The OpenAI Responses API on an HttpServer, over the chat completions path:
//   POST   /v1/responses               create (stream: Responses events over SSE)
//   GET    /v1/responses/{id}          a stored response
//   DELETE /v1/responses/{id}          forget a stored response
//   POST   /v1/responses/{id}/cancel   a clear 400: only background responses can be
//                                      cancelled, and background is not implemented
// A request is translated (responses_request.h) into a chat completions request, parsed by
// the chat parser and run by Frontend::Generate like /v1/chat/completions; the output is
// rendered by ResponsesEventWriter. Stored responses (responses_store.h) are per tenant: a
// tenant never sees, continues or deletes another's. API key and drain gate as every route.
#pragma once

#include <chrono>

#include "base/clock.h"
#include "server/core/frontend.h"
#include "server/http/http_server.h"
#include "server/openai/responses_store.h"
#include "server/openai/sse_liveness.h"

namespace kvserve::server {

struct ResponsesRoutesOptions {
  SseLivenessOptions sse;  // as OpenAiRoutesOptions::sse (the same intervals)
  bool watch_connections = true;
  const base::Clock* clock = nullptr;       // monotonic; required (store TTL, keep-alives)
  const base::Clock* wall_clock = nullptr;  // Unix epoch (created_at); required
  ResponseStoreOptions store;
};

void RegisterResponsesRoutes(HttpServer& http, Frontend& frontend, ResponsesRoutesOptions options);

}  // namespace kvserve::server
