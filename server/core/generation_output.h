// What a generation produces for the front ends, after detokenization and stop-string
// handling: per-choice deltas while it runs, per-choice results once it is over, and the
// request's usage. Value types, protocol-neutral (the OpenAI writer and the gRPC
// converter both render these).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_call_parser.h"
#include "engine/request_types.h"

namespace kvserve::server {

struct TopLogprobEntry {
  int32_t token_id = 0;
  std::string token;  // TokenText(token_id); may be a partial UTF-8 sequence
  float logprob = 0.0f;
};

struct LogprobEntry {
  int32_t token_id = 0;
  std::string token;
  float logprob = 0.0f;
  std::vector<TopLogprobEntry> top;
  int32_t rank = 0;         // prompt logprobs: 1 + tokens with a higher logit
  bool no_logprob = false;  // the first prompt token (no context): written as null
};

// New output of one choice. Choice index = prompt index * n + sample index.
// Chat choices read by a chat::ChatOutputParser: `text` is the content only, `reasoning` the
// reasoning_content, and `tool_calls` the calls parsed (they come with the final delta).
struct ChoiceDelta {
  int index = 0;
  std::string text;
  std::string reasoning;
  std::vector<chat::ToolCall> tool_calls;
  std::vector<int32_t> token_ids;
  std::vector<LogprobEntry> logprobs;  // parallel to token_ids when requested
  // prompt_logprobs: every prompt token, the first with no_logprob (once per choice).
  std::vector<LogprobEntry> prompt_logprobs;
  std::vector<float> embedding;  // embedding requests: the pooled vector (once)
  std::optional<engine::FinishReason> finish;
  std::optional<std::string> stop_string;  // the stop string that ended the choice
  std::optional<int32_t> stop_token_id;    // the stop token id that ended it
  std::string error;                       // with FinishReason::kError
  bool unavailable = false;                // with kError: 503 / UNAVAILABLE (engine TokenEvent)
};

struct ChoiceResult {
  int index = 0;
  std::string text;
  std::string reasoning;
  std::vector<chat::ToolCall> tool_calls;
  std::vector<int32_t> token_ids;
  std::vector<LogprobEntry> logprobs;
  std::vector<LogprobEntry> prompt_logprobs;
  std::vector<float> embedding;
  engine::FinishReason finish = engine::FinishReason::kStop;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  std::string error;
  bool unavailable = false;
};

struct UsageSummary {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  engine::CompressionSummary compression;
  int64_t spec_draft_tokens = 0;     // speculative decoding: guesses verified
  int64_t spec_accepted_tokens = 0;  // of them, accepted
  int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

// Folds deltas into per-choice results (non-streaming responses, gRPC Complete).
class ChoiceAccumulator {
 public:
  explicit ChoiceAccumulator(int num_choices);
  void Add(ChoiceDelta delta);
  const std::vector<ChoiceResult>& results() const { return results_; }
  // The first choice that ended with an engine error, if any.
  const ChoiceResult* first_error() const;

 private:
  std::vector<ChoiceResult> results_;
};

}  // namespace kvserve::server
