// Frontend: the protocol-neutral operations both front ends expose (generate, tokenize,
// detokenize, list the model, abort), plus authentication and the drain state. The HTTP
// routes and the gRPC service only translate their wire format to and from these calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/logger.h"
#include "chat/chat_formats.h"
#include "config/config.h"
#include "engine/engine_client.h"
#include "server/auth/auth.h"
#include "server/auth/tenant_rate_limiter.h"
#include "server/core/generation.h"
#include "server/core/generation_request.h"
#include "server/core/request_builder.h"
#include "server/core/request_ids.h"
#include "server/core/request_registry.h"
#include "server/core/text_codec.h"
#include "structured/grammar_cache.h"

namespace kvserve::server {

struct FrontendOptions {
  std::string model_name;      // the served model's name (`model` in requests)
  int64_t max_model_len = 0;
  int64_t created_unix = 0;    // "created" of the model card (server start)
  std::string version;         // kvserve version for /version
  uint64_t id_seed = 0;        // keys request ids
  config::RequestLimits limits;  // per-request limits (server.max_*)
  config::EmbeddingConfig embedding;  // /v1/embeddings pooling and normalisation
  chat::ChatFormats chat_formats;  // the served model's reasoning and tool-call formats
};

struct TokenizeRequest {
  std::string model;
  bool use_messages = false;
  std::string prompt;
  std::vector<ChatMessage> messages;
  bool add_special_tokens = true;
  ChatPromptOptions chat;  // add_generation_prompt, continue_final_message, tools, chat_template_kwargs
  bool return_token_strs = false;
};

struct TokenizeResult {
  std::vector<int32_t> tokens;
  std::vector<std::string> token_strs;  // only when asked for
  int64_t max_model_len = 0;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

class Frontend {
 public:
  // `limiter` (may be null: no rate limits) admits each generation request once its prompts
  // are tokenized and charges its output tokens when it ends.
  Frontend(engine::EngineClient& engine, const TextCodec& codec, Authenticator auth,
           FrontendOptions options, base::Logger logger,
           std::unique_ptr<TenantRateLimiter> limiter = nullptr);

  // Tenant of an Authorization header value; nullptr: default tenant (open server).
  absl::StatusOr<const config::TenantConfig*> Authenticate(std::string_view authorization) const;
  // Replaces the tenants' API keys (SIGHUP); see Authenticator::ReloadKeys.
  absl::Status ReloadKeys(const std::vector<config::TenantConfig>& tenants) { return auth_.ReloadKeys(tenants); }

  // Validates, tokenizes and submits. Errors: InvalidArgument (names the field), NotFound
  // (model), PermissionDenied, ResourceExhausted (a tenant rate limit: the status carries a
  // RateLimitState, rate_limit_status.h; or the engine's queue), Unavailable (draining).
  absl::StatusOr<std::unique_ptr<Generation>> Generate(const GenerationRequest& request,
                                                       const config::TenantConfig* tenant);
  absl::StatusOr<TokenizeResult> Tokenize(const TokenizeRequest& request) const;
  absl::StatusOr<std::string> Detokenize(const DetokenizeRequest& request) const;
  // Aborts one of `tenant`'s requests by its client-visible id; false if there is none.
  bool Abort(std::string_view request_id, const config::TenantConfig* tenant);

  // Unavailable while draining (new requests are refused), OK otherwise.
  absl::Status CheckAccepting() const;
  void StartDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  bool alive() const { return engine_.Stats().alive; }
  bool ready() const { return !draining() && alive(); }
  // Requests whose response is still being produced.
  RequestRegistry& registry() { return registry_; }

  // LoRA adapters `tenant` may select by `model` (its allow-list; all without one), by name.
  std::vector<engine::AdapterCard> VisibleAdapters(const config::TenantConfig* tenant) const;
  // The engine, for the adapter admin calls (lora_routes.h).
  engine::EngineClient& engine() { return engine_; }

  const FrontendOptions& options() const { return options_; }
  const TextCodec& codec() const { return codec_; }
  const base::Logger& logger() const { return logger_; }

 private:
  engine::EngineClient& engine_;
  const TextCodec& codec_;
  Authenticator auth_;
  FrontendOptions options_;
  base::Logger logger_;
  RequestIdGenerator ids_;
  RequestRegistry registry_;
  std::unique_ptr<TenantRateLimiter> limiter_;  // null: no rate limits
  std::unique_ptr<structured::GrammarCache> grammars_;  // null: the codec has no token trie
  std::atomic<bool> draining_{false};
};

}  // namespace kvserve::server
