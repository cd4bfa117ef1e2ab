// OpenAI-compatible request bodies (JSON) → GenerationRequest and friends. OpenAI members we
// do not implement are refused with a 400 naming them (the table in openai_param_support.h);
// other unknown fields are ignored (clients send vendor extras); a known field with the wrong
// type or range is an InvalidArgument naming it (OpenAI's `param`). nlohmann::json stays
// inside the .cc.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/core/frontend.h"
#include "server/core/generation_request.h"

namespace kvserve::server {

struct HttpGenerationRequest {
  GenerationRequest request;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage: a last chunk with usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage on every chunk
  // `timeout`: seconds the whole request may take; past it the generation is aborted and
  // the client gets a 504 (streaming: an in-band error after the tokens already sent).
  std::optional<double> timeout_seconds;
  bool return_token_ids = false;  // completions: vLLM's return_token_ids (see ResponseMeta)
};

absl::StatusOr<HttpGenerationRequest> ParseCompletionRequest(std::string_view body);
absl::StatusOr<HttpGenerationRequest> ParseChatRequest(std::string_view body);
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body);

}  // namespace kvserve::server
