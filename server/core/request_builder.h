// From a decoded GenerationRequest to the engine::RequestSpecs to submit: range checks
// (every error names its field), the model name (404), the tenant's compression policy
// (403), tokenization or chat-template rendering, and the context-length checks (400).
// Shared by the HTTP and gRPC front ends; pure functions of their inputs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/request_spec.h"
#include "server/core/generation_request.h"
#include "server/core/text_codec.h"

namespace kvserve::server {

struct ModelLimits {
  std::string served_model_name;
  int64_t max_model_len = 0;
  config::RequestLimits requests;  // server.max_* (configuration.md)
  // LoRA: whether a served adapter has this name (null: none are served).
  std::function<bool(const std::string&)> has_adapter;
};

struct PreparedPrompt {
  engine::RequestSpec spec;   // prompt_tokens filled
  std::string echo_text;      // non-empty only with echo
  std::string chat_prompt_text;  // chat: the rendered prompt (its end says whether reasoning is open)
};

// Range and shape checks that need neither the model nor the tenant.
absl::Status ValidateGenerationRequest(const GenerationRequest& request,
                                       const config::RequestLimits& limits = {});
// NotFound unless `model` is empty or the served model's name.
absl::Status CheckModel(std::string_view model, std::string_view served_model_name);
// The LoRA adapter `model` selects: "" for the base (empty or the served name), the name of
// an adapter the tenant may use, else ModelNotFound (an adapter outside the tenant's
// allow-list answers exactly like an unknown model).
absl::StatusOr<std::string> ResolveModel(const std::string& model, const ModelLimits& limits,
                                         const config::TenantConfig* tenant);
// PermissionDenied if the tenant may not use the policy the request names.
absl::Status CheckTenantPolicy(const config::TenantConfig* tenant,
                               const engine::CompressionRequest& compression);

// Everything above plus tokenization; one PreparedPrompt per engine request. Engine
// request ids are `request_id`, or `request_id-<i>` when there are several prompts.
absl::StatusOr<std::vector<PreparedPrompt>> BuildRequests(const GenerationRequest& request,
                                                          const config::TenantConfig* tenant,
                                                          const TextCodec& codec,
                                                          const ModelLimits& limits,
                                                          std::string_view request_id);

}  // namespace kvserve::server
