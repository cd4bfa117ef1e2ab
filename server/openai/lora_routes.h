// The LoRA adapter admin endpoints (vLLM's runtime adapter updating, docs/lora.md):
//
//   POST /v1/load_lora_adapter    {"lora_name": "...", "lora_path": "..."}  200 text / 4xx JSON
//   POST /v1/unload_lora_adapter  {"lora_name": "..."}                      200 text / 404 JSON
//
// Who may call them: with lora.admin_api_key set, only 'Authorization: Bearer <that key>'
// (tenant keys do not open them); without it, only an open server (no tenant keys) answers,
// and a server with tenants refuses (403) rather than let one tenant unload another's adapter.
// Load reads and checks the directory before answering: errors name the file and field.
// Unload forgets the name at once; requests already running on the adapter finish on it.
// Registered only when the server serves adapters (lora.enabled or lora.adapters).
#pragma once

#include <optional>
#include <string>

#include "server/auth/auth.h"
#include "server/core/frontend.h"
#include "server/http/http_server.h"

namespace kvserve::server {

struct LoraRoutesOptions {
  std::optional<BearerKey> admin_key;  // lora.admin_api_key
  bool open_server = true;             // no tenant keys configured
};

void RegisterLoraRoutes(HttpServer& http, Frontend& frontend, LoraRoutesOptions options);

}  // namespace kvserve::server
