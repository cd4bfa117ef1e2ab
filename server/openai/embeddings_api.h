// /v1/embeddings, OpenAI's shape: the request read into a generation request whose prompts are
// the inputs (each one engine request that prefills its input, pools the final hidden states
// and samples one discarded token), and the response written from the pooled vectors.
//
//   {"input": "text" | ["text", ...] | [ids] | [[ids], ...], "model"?, "encoding_format"?:
//   float|base64,
//    "dimensions": refused (400 naming it: the model's hidden size is fixed), "user"?: accepted}
//   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] |
//   "<base64>"}],
//       "model", "usage": {"prompt_tokens", "total_tokens"}}
//
// Pooling (last token or mean) and L2 normalisation are server settings (server.embedding_*).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "server/core/generation_output.h"
#include "server/core/generation_request.h"

namespace kvserve::server {

struct EmbeddingsRequest {
  GenerationRequest request;  // completions-shaped: prompts, max_tokens 1, greedy, embed pooling
  bool base64 = false;        // encoding_format "base64": little-endian float32, base64
};

// Errors are 400s naming the field.
absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body,
                                                         const config::EmbeddingConfig& config);

// `choices[i].embedding` is input i's pooled vector (normalised here when configured).
std::string EmbeddingsResponseJson(const std::string& model,
                                   const std::vector<ChoiceResult>& choices,
                                   const UsageSummary& usage, bool base64, bool normalize);

}  // namespace kvserve::server
