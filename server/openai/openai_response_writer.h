// Generation output → OpenAI-compatible JSON (responses, streaming chunks, errors, model
// list, tokenizer endpoints). Compact one-line JSON (fit for SSE `data:` lines), keys in
// OpenAI's order; text that is not valid UTF-8 (a logprob token may be half a character)
// is written with U+FFFD replacements. nlohmann::json stays inside the .cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/core/frontend.h"
#include "server/core/generation_output.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {

struct ResponseMeta {
  std::string id;
  int64_t created = 0;  // unix seconds
  std::string model;
  // vLLM's `return_token_ids` (completions): each choice (and each streamed chunk) also
  // carries "token_ids", the generated ids, so a client can compare tokens, not text.
  bool return_token_ids = false;
};

std::string CompletionResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                   const UsageSummary& usage, bool logprobs);
std::string ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             const UsageSummary& usage, bool logprobs);

// Streaming chunks. `usage` non-null: attach it (continuous usage stats); `usage_null`:
// write "usage": null (stream_options.include_usage asks for it on every chunk).
// `text_offset` is the choice's text length before this delta (completions logprobs).
std::string CompletionChunkJson(const ResponseMeta& meta, const ChoiceDelta& delta, bool logprobs,
                                int64_t text_offset, const UsageSummary* usage, bool usage_null);
// The first chunk of each chat choice: {"delta": {"role": "assistant", "content": ""}}.
std::string ChatRoleChunkJson(const ResponseMeta& meta, int index, bool usage_null);
std::string ChatChunkJson(const ResponseMeta& meta, const ChoiceDelta& delta, bool logprobs,
                          const UsageSummary* usage, bool usage_null);
// The final chunk with "choices": [] and the request's usage.
std::string UsageChunkJson(const ResponseMeta& meta, bool chat, const UsageSummary& usage);

std::string ErrorJson(const HttpError& error);
// The base model's card, then one per adapter (vLLM's shape: parent = the base, root = its path).
std::string ModelsJson(const FrontendOptions& options,
                       const std::vector<engine::AdapterCard>& adapters = {});
std::string TokenizeResponseJson(const TokenizeResult& result);
std::string DetokenizeResponseJson(std::string_view prompt);
std::string VersionJson(std::string_view version);

}  // namespace kvserve::server
