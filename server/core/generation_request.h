// GenerationRequest: a completion or chat request as both front ends understand it, after
// the wire format (OpenAI JSON or kvserve.v1 proto) has been decoded and before it is
// validated, tokenized and turned into engine::RequestSpec by request_builder.h. Having
// one neutral shape is what keeps the HTTP and gRPC layers from re-implementing each
// other: they only decode into it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_spec.h"
#include "server/core/text_codec.h"
#include "structured/grammar_spec.h"

namespace kvserve::server {

// The engine's sampling knobs, whatever type RequestSpec carries them in.
using SamplingParams = decltype(engine::RequestSpec::sampling);

enum class RequestKind { kCompletion, kChat };

// One completion prompt: text, or token ids given by the client.
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
  bool is_token_ids = false;
};

// OpenAI's tool_choice. kRequired and kNamed are enforced by constrained decoding
// (tool_choice_grammar.h).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// Chat-only members: how the prompt is rendered and how the output is read back.
struct ChatOptions {
  ChatPromptOptions prompt;          // add_generation_prompt, continue_final_message, tools, kwargs
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto when tools are given, else none
  std::string tool_choice_name;      // kNamed
  bool parallel_tool_calls = true;   // false: at most one tool call per choice
  bool include_reasoning = true;     // vLLM: false drops reasoning_content
  // Each tool's `function.parameters` (JSON text, "" when absent) by name, in request order: a
  // named or "required" tool_choice constrains the output to valid calls.
  std::vector<std::pair<std::string, std::string>> tool_parameters;
};

struct GenerationRequest {
  RequestKind kind = RequestKind::kCompletion;
  std::string model;                    // empty: the served model
  std::vector<PromptInput> prompts;     // completions: one engine request per prompt
  std::vector<ChatMessage> messages;    // chat
  std::optional<int64_t> max_tokens;    // none: 16 for completions, the rest of the context for chat
  int64_t min_tokens = 0;
  int64_t n = 1;
  // best_of > n: that many samples run; the n with the highest cumulative logprob are
  // returned (usage counts all). Not with streaming (the parser refuses it).
  std::optional<int64_t> best_of;
  SamplingParams sampling;              // logprobs: top-N alternatives per token
  bool return_logprobs = false;         // logprobs of the sampled tokens (with sampling.logprobs alternatives)
  std::vector<std::string> stop;        // stop strings (matched on decoded text)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;  // vLLM: the matched stop string stays in the text
  std::vector<std::string> bad_words;  // vLLM: tokenized by request_builder into sampling.bad_words
  std::optional<int64_t> truncate_prompt_tokens;  // vLLM: keep only the last N prompt tokens
  std::optional<int64_t> prompt_logprobs;  // vLLM: the prompt tokens' logprobs, N alternatives each
  std::optional<int64_t> priority;      // none: the tenant's default
  std::string cache_salt;
  std::string caller_request_id;        // gRPC request_id / vLLM request_id; empty: generated
  bool echo = false;                    // completions: prepend the prompt to the text
  bool add_special_tokens = true;       // completions: BOS for text prompts
  ChatOptions chat;                     // chat
  bool skip_special_tokens = true;
  engine::CompressionRequest compression;
  engine::SpeculativeRequest speculative;  // `speculative` object (docs/speculative.md)
  // Structured outputs (response_format json_object/json_schema, guided_json/regex/choice/
  // grammar): the output is constrained to this grammar. (tool_choice adds its own.)
  std::optional<structured::GrammarSpec> grammar;
};

}  // namespace kvserve::server
