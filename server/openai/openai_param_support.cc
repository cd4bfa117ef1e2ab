#include "server/openai/openai_param_support.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/absl_compat.h"

namespace kvserve::server {
namespace {

constexpr uint8_t kC = static_cast<uint8_t>(ParamScope::kCompletion);
constexpr uint8_t kH = static_cast<uint8_t>(ParamScope::kChat);
constexpr uint8_t kCH = kCompletionAndChat;
constexpr uint8_t kM = static_cast<uint8_t>(ParamScope::kMessage);
constexpr uint8_t kG = static_cast<uint8_t>(ParamScope::kGrpc);
constexpr uint8_t kR = static_cast<uint8_t>(ParamScope::kResponses);
constexpr FieldStatus kOn = FieldStatus::kHonoured;
constexpr FieldStatus kNo = FieldStatus::kRefused;
constexpr FieldStatus kHint = FieldStatus::kHint;

constexpr std::string_view kNoStructuredOutputs =
    "use response_format (chat), guided_json, guided_regex, guided_choice or guided_grammar";

// Order: the docs table follows it (completions and chat, then messages, then gRPC).
constexpr RequestField kFields[] = {
    // ---- Completions and chat: OpenAI members.
    {kC, "prompt", kOn,
     "string, [string], [int] or [[int]]; several prompts give len(prompt) x n choices"},
    {kH, "messages", kOn,
     "the conversation, rendered with the model's chat template (members below)"},
    {kCH, "model", kOn, "must be the served model's name (404 otherwise); optional"},
    {kCH, "max_tokens", kOn,
     "int >= 1: new tokens per sample; default 16 (completions) or the rest of the context (chat)"},
    {kH, "max_completion_tokens", kOn, "OpenAI's newer name of max_tokens (wins over it)"},
    {kC, "max_completion_tokens", kNo, "a chat completions member; use max_tokens"},
    {kCH, "temperature", kOn, "[0, 2]; 0 is greedy"},
    {kCH, "top_p", kOn, "(0, 1]: nucleus sampling"},
    {kCH, "n", kOn, "[1, server.max_n]: samples per prompt"},
    {kCH, "stop", kOn,
     "string or [string]: the text ends before the first match; stop_reason names it"},
    {kCH, "seed", kOn, "int: same seed, same output"},
    {kCH, "presence_penalty", kOn, "[-2, 2]"},
    {kCH, "frequency_penalty", kOn, "[-2, 2]"},
    {kCH, "logit_bias", kOn,
     "{\"<token id>\": [-100, 100]}, at most 300: added to the logit before sampling"},
    {kC, "logprobs", kOn, "int [0, 20]: the sampled token's logprob and that many alternatives"},
    {kH, "logprobs", kOn, "bool: the sampled tokens' logprobs"},
    {kH, "top_logprobs", kOn, "int [0, 20]: alternatives per token; needs logprobs true"},
    {kC, "top_logprobs", kNo, "a chat completions member; completions take the count in logprobs"},
    {kC, "echo", kOn,
     "bool: the prompt is prepended to the text; with logprobs, its tokens' logprobs lead "
     "(the first: null)"},
    {kH, "echo", kNo, "echo is a completions member", "false"},
    {kC, "suffix", kNo, "insertion (fill-in-the-middle) is not implemented", "\"\""},
    {kC, "best_of", kOn,
     "int in [n, server.max_n]: that many samples run, the n with the highest cumulative logprob "
     "are returned, best first; usage counts all; not with stream"},
    {kCH, "stream", kOn, "bool: server-sent events"},
    {kCH, "stream_options", kOn,
     "{include_usage, continuous_usage_stats}: usage on the last / every chunk; needs stream"},
    {kH, "tools", kOn,
     "[{type: function, function: {name, description, parameters}}]: reach the chat template"},
    {kC, "tools", kNo, "tool calling is a chat completions feature"},
    {kH, "tool_choice", kOn,
     "none | auto | required | {type: function, function: {name}}; required and named are enforced "
     "by constrained decoding"},
    {kC, "tool_choice", kNo, "tool calling is a chat completions feature", "\"none\""},
    {kH, "parallel_tool_calls", kOn, "bool, default true; false: at most one call per choice"},
    {kC, "parallel_tool_calls", kNo, "tool calling is a chat completions feature", "true"},
    {kH, "response_format", kOn, "{type: text | json_object | json_schema}: structured outputs"},
    {kC, "response_format", kNo, "use guided_json / guided_regex on completions",
     "{\"type\":\"text\"}"},
    {kH, "functions", kNo, "function calling is not implemented; use tools"},
    {kH, "function_call", kNo, "function calling is not implemented; use tool_choice", "\"none\""},
    {kH, "audio", kNo, "audio output is not implemented"},
    {kH, "modalities", kNo, "only text output is implemented", "[\"text\"]"},
    {kH, "prediction", kNo, "predicted outputs are not implemented"},
    {kH, "web_search_options", kNo, "web search is not implemented"},
    {kH, "reasoning_effort", kNo, "the served model has no reasoning-effort control"},
    {kH, "verbosity", kNo, "the served model has no verbosity control"},
    {kCH, "user", kHint, "accepted, unused"},
    {kCH, "metadata", kHint, "accepted, unused"},
    {kCH, "store", kHint, "accepted, unused (nothing is stored)"},
    {kCH, "service_tier", kHint, "accepted, unused"},
    {kCH, "safety_identifier", kHint, "accepted, unused"},
    {kCH, "prompt_cache_key", kHint, "accepted, unused (prefix caching is automatic)"},
    // ---- vLLM's extras.
    {kCH, "top_k", kOn, "-1 or >= 0; 0 and -1 are off"},
    {kCH, "min_p", kOn, "[0, 1]: drop tokens below min_p x the top probability"},
    {kCH, "repetition_penalty", kOn, "(0, 2]; 1 is off"},
    {kCH, "min_tokens", kOn,
     "int in [0, max_tokens]: EOS and stop_token_ids are masked, and stop strings not searched, "
     "before that many tokens"},
    {kCH, "stop_token_ids", kOn, "[int]: a sample ends at any of these tokens"},
    {kCH, "ignore_eos", kOn, "bool: EOS does not end a sample"},
    {kCH, "skip_special_tokens", kOn,
     "bool, default true: special tokens are left out of the text"},
    {kC, "add_special_tokens", kOn, "bool, default true: BOS for text prompts"},
    {kH, "add_special_tokens", kNo, "the chat template places special tokens", "false"},
    {kC, "return_token_ids", kOn, "bool: choices and chunks carry the generated token ids"},
    {kH, "return_token_ids", kNo, "a completions member here", "false"},
    {kCH, "priority", kOn,
     "int: lower runs first (scheduler.queue_policy=priority); default the tenant's"},
    {kCH, "cache_salt", kOn, "string: isolates prefix-cache reuse further"},
    {kCH, "request_id", kOn, "string: caller-chosen id (unique among running requests)"},
    {kCH, "guided_json", kOn, "JSON schema (object or string): structured outputs"},
    {kCH, "guided_regex", kOn, "regex: structured outputs"},
    {kCH, "guided_choice", kOn, "[string]: structured outputs"},
    {kCH, "guided_grammar", kOn, "GBNF grammar: structured outputs"},
    {kCH, "guided_decoding_backend", kHint,
     "accepted, unused (kvserve has one structured-output backend)"},
    {kCH, "guided_whitespace_pattern", kNo, "JSON whitespace is fixed by the schema compiler"},
    {kCH, "structured_outputs", kNo, kNoStructuredOutputs},
    {kH, "add_generation_prompt", kOn,
     "bool, default true: end the prompt with the assistant header"},
    {kH, "continue_final_message", kOn, "bool: continue the last (assistant) message"},
    {kH, "chat_template_kwargs", kOn, "object: extra chat template variables"},
    {kH, "include_reasoning", kOn, "bool, default true; false drops reasoning_content"},
    {kH, "chat_template", kNo, "the server's chat template is fixed (model.chat_template)"},
    {kH, "documents", kNo, "retrieval documents are not passed to the template"},
    {kH, "mm_processor_kwargs", kNo, "the served model is text-only"},
    {kC, "prompt_embeds", kNo, "prompts are text or token ids"},
    {kCH, "include_stop_str_in_output", kOn,
     "bool: a matched stop string stays at the end of the text"},
    {kCH, "allowed_token_ids", kOn,
     "[int], non-empty: only these tokens may be sampled (a mask before sampling)"},
    {kCH, "bad_words", kOn,
     "[string]: never generated; tokenized as vLLM does (alone, and after a space when that is a "
     "word token of its own); the last token of a sequence is masked when the output ends with "
     "its other tokens"},
    {kCH, "truncate_prompt_tokens", kOn,
     "int >= 1: only the last N prompt tokens are used (usage counts those)"},
    {kCH, "prompt_logprobs", kOn,
     "int [0, 20]: each prompt token's logprob (the first: null), rank and that many alternatives, "
     "from the prefill (no prefix-cache reuse for the request); not with stream; CPU backend"},
    {kH, "best_of", kNo, "generate n samples instead (only best_of = 1)", "1"},
    {kCH, "use_beam_search", kNo, "beam search is not implemented; use n samples", "false"},
    {kCH, "length_penalty", kNo, "applies to beam search, which is not implemented", "1"},
    {kCH, "spaces_between_special_tokens", kNo,
     "special tokens are always decoded without added spaces", "true"},
    {kCH, "logits_processors", kNo, "custom logits processors are not loaded"},
    {kCH, "return_tokens_as_token_ids", kNo, "logprobs name tokens by their text", "false"},
    {kCH, "kv_transfer_params", kNo, "disaggregated prefill is not implemented"},
    // ---- kvserve's own.
    {kCH, "kv_compression", kOn, "object or policy name: per-request KV compression (below)"},
    {kCH, "vllm_xargs", kOn,
     "{kv_compression: policy, kv_budget: int}: the same through vLLM's extension channel"},
    {kCH, "timeout", kOn, "seconds in (0, 86400]: the request is aborted past it (504)"},
    {kCH, "speculative", kOn,
     "{method: none|ngram|draft (draft: the server's speculative.draft_model), num_tokens 1..16, ngram_min, ngram_max 1..64}, each optional (unset: "
     "the "
     "server's speculative.*): per-request speculative decoding, output unchanged "
     "(docs/speculative.md)"},
    // ---- Chat message members.
    {kM, "role", kOn, "system, developer (read as system), user, assistant or tool"},
    {kM, "content", kOn, "string, null or text parts [{type: text, text}] (joined with newlines)"},
    {kM, "name", kOn, "passed to the template"},
    {kM, "tool_calls", kOn, "assistant: earlier calls, arguments parsed for the template"},
    {kM, "tool_call_id", kOn, "tool: the call answered (required there)"},
    {kM, "reasoning_content", kOn, "assistant: an earlier turn's reasoning, for the template"},
    {kM, "function_call", kNo, "function calling is not implemented"},
    {kM, "audio", kNo, "audio is not implemented"},
    // ---- gRPC (kvserve.v1): the same effects as the HTTP member of the same name.
    {kG, "GenerateRequest.model", kOn, "as model"},
    {kG, "GenerateRequest.prompt", kOn, "a text prompt"},
    {kG, "GenerateRequest.prompt_token_ids", kOn, "a token-id prompt"},
    {kG, "GenerateRequest.sampling", kOn, "SamplingParams below"},
    {kG, "GenerateRequest.kv_compression", kOn, "as kv_compression"},
    {kG, "GenerateRequest.priority", kOn, "as priority (0: the tenant's)"},
    {kG, "GenerateRequest.cache_salt", kOn, "as cache_salt"},
    {kG, "GenerateRequest.request_id", kOn, "as request_id"},
    {kG, "GenerateRequest.speculative", kOn, "as speculative (Speculative below)"},
    {kG, "ChatRequest.model", kOn, "as model"},
    {kG, "ChatRequest.messages", kOn, "as messages (ChatMessage below)"},
    {kG, "ChatRequest.sampling", kOn, "SamplingParams below"},
    {kG, "ChatRequest.kv_compression", kOn, "as kv_compression"},
    {kG, "ChatRequest.priority", kOn, "as priority (0: the tenant's)"},
    {kG, "ChatRequest.cache_salt", kOn, "as cache_salt"},
    {kG, "ChatRequest.request_id", kOn, "as request_id"},
    {kG, "ChatRequest.tools", kOn, "as tools (Tool below)"},
    {kG, "ChatRequest.tool_choice", kOn, "as tool_choice (ToolChoice below)"},
    {kG, "ChatRequest.parallel_tool_calls", kOn, "as parallel_tool_calls"},
    {kG, "ChatRequest.speculative", kOn, "as speculative (Speculative below)"},
    {kG, "Speculative.method", kOn, "as speculative.method (\"\": the server's)"},
    {kG, "Speculative.num_tokens", kOn, "as speculative.num_tokens"},
    {kG, "Speculative.ngram_min", kOn, "as speculative.ngram_min"},
    {kG, "Speculative.ngram_max", kOn, "as speculative.ngram_max"},
    {kG, "SamplingParams.max_tokens", kOn, "as max_tokens (default 16)"},
    {kG, "SamplingParams.temperature", kOn, "as temperature"},
    {kG, "SamplingParams.top_p", kOn, "as top_p"},
    {kG, "SamplingParams.top_k", kOn, "as top_k"},
    {kG, "SamplingParams.min_p", kOn, "as min_p"},
    {kG, "SamplingParams.seed", kOn, "as seed"},
    {kG, "SamplingParams.presence_penalty", kOn, "as presence_penalty"},
    {kG, "SamplingParams.frequency_penalty", kOn, "as frequency_penalty"},
    {kG, "SamplingParams.repetition_penalty", kOn, "as repetition_penalty"},
    {kG, "SamplingParams.stop", kOn, "as stop"},
    {kG, "SamplingParams.stop_token_ids", kOn, "as stop_token_ids"},
    {kG, "SamplingParams.n", kOn, "as n"},
    {kG, "SamplingParams.logprobs", kOn, "as completions' logprobs"},
    {kG, "SamplingParams.ignore_eos", kOn, "as ignore_eos"},
    {kG, "SamplingParams.logit_bias", kOn, "as logit_bias"},
    {kG, "SamplingParams.structured", kOn, "structured outputs (StructuredOutput below)"},
    {kG, "SamplingParams.min_tokens", kOn, "as min_tokens"},
    {kG, "SamplingParams.include_stop_str_in_output", kOn, "as include_stop_str_in_output"},
    {kG, "SamplingParams.allowed_token_ids", kOn, "as allowed_token_ids"},
    {kG, "SamplingParams.bad_words", kOn, "as bad_words"},
    {kG, "SamplingParams.truncate_prompt_tokens", kOn, "as truncate_prompt_tokens"},
    {kG, "SamplingParams.best_of", kOn,
     "as best_of, on Complete; Generate and Chat refuse best_of > n"},
    {kG, "StructuredOutput.json_schema", kOn, "as guided_json"},
    {kG, "StructuredOutput.json_object", kOn, "as response_format json_object"},
    {kG, "StructuredOutput.regex", kOn, "as guided_regex"},
    {kG, "StructuredOutput.choice", kOn, "as guided_choice"},
    {kG, "StructuredOutput.grammar", kOn, "as guided_grammar"},
    {kG, "Choices.choices", kOn, "the choices"},
    {kG, "TokenIds.ids", kOn, "the token ids"},
    {kG, "KvCompression.policy", kOn, "as kv_compression.policy"},
    {kG, "KvCompression.budget", kOn, "as kv_compression.budget"},
    {kG, "KvCompression.ratio", kOn, "as kv_compression.ratio"},
    {kG, "KvCompression.divide_length", kOn, "as kv_compression.divide_length"},
    {kG, "KvCompression.window", kOn, "as kv_compression.window"},
    {kG, "KvCompression.sinks", kOn, "as kv_compression.sinks"},
    {kG, "KvCompression.protect_prompt", kOn, "as kv_compression.protect_prompt"},
    {kG, "KvCompression.audit", kOn, "as kv_compression.audit"},
    {kG, "KvCompression.kv_dtype", kOn, "as kv_compression.kv_dtype"},
    {kG, "KvCompression.k_dtype", kOn, "as kv_compression.k_dtype"},
    {kG, "KvCompression.v_dtype", kOn, "as kv_compression.v_dtype"},
    {kG, "KvCompression.demote", kOn, "as kv_compression.demote"},
    {kG, "ChatMessage.role", kOn, "as messages[i].role"},
    {kG, "ChatMessage.content", kOn, "as messages[i].content"},
    {kG, "ChatMessage.tool_calls", kOn, "as messages[i].tool_calls (ToolCall below)"},
    {kG, "ChatMessage.tool_call_id", kOn, "as messages[i].tool_call_id"},
    {kG, "ChatMessage.name", kOn, "as messages[i].name"},
    {kG, "ChatMessage.reasoning_content", kOn, "as messages[i].reasoning_content"},
    {kG, "Tool.name", kOn, "the function's name"},
    {kG, "Tool.description", kOn, "the function's description"},
    {kG, "Tool.parameters", kOn, "the arguments' JSON schema, as JSON text"},
    {kG, "ToolChoice.mode", kOn, "none | auto | required"},
    {kG, "ToolChoice.function", kOn, "this function must be called"},
    {kG, "ToolCall.id", kOn, "the call's id"},
    {kG, "ToolCall.name", kOn, "the function called"},
    {kG, "ToolCall.arguments", kOn, "JSON text of an object"},
    // ---- /v1/responses (server/openai/responses_request.h): every member is a row; others
    // are a 400.
    {kR, "input", kOn,
     "string, or items: message (roles user, assistant, system, developer; input_text / "
     "output_text parts), function_call, function_call_output, reasoning"},
    {kR, "model", kOn, "as model"},
    {kR, "instructions", kOn, "a system message first; not carried over by previous_response_id"},
    {kR, "max_output_tokens", kOn, "as max_tokens"},
    {kR, "temperature", kOn, "as temperature"},
    {kR, "top_p", kOn, "as top_p"},
    {kR, "tools", kOn, "[{type: function, name, description, parameters, strict}]: as chat tools"},
    {kR, "tool_choice", kOn, "none | auto | required | {type: function, name}: as chat tool_choice"},
    {kR, "parallel_tool_calls", kOn, "as parallel_tool_calls"},
    {kR, "text", kOn, "{format: {type: text | json_object | json_schema, name, schema, strict}}: structured outputs"},
    {kR, "stream", kOn, "bool: Responses streaming events (response.created ... response.completed)"},
    {kR, "store", kOn,
     "bool, default true: kept in memory for GET and previous_response_id (server.responses_store_*)"},
    {kR, "previous_response_id", kOn, "continue a stored response's conversation (404 if unknown or expired)"},
    {kR, "metadata", kHint, "accepted, echoed on the response"},
    {kR, "user", kHint, "accepted, unused"},
    {kR, "safety_identifier", kHint, "accepted, unused"},
    {kR, "prompt_cache_key", kHint, "accepted, unused (prefix caching is automatic)"},
    {kR, "service_tier", kHint, "accepted, unused"},
    {kR, "reasoning", kNo, "the served model has no reasoning-effort or summary control",
     "{\"effort\":null,\"summary\":null}"},
    {kR, "background", kNo, "background responses are not implemented", "false"},
    {kR, "include", kNo, "no extra output data (encrypted reasoning, logprobs, sources) is implemented"},
    {kR, "truncation", kNo, "the input is never truncated (a longer one is a 400)", "\"disabled\""},
    {kR, "top_logprobs", kNo, "logprobs are not implemented on /v1/responses", "0"},
    {kR, "max_tool_calls", kNo, "use parallel_tool_calls false for one call"},
    {kR, "prompt", kNo, "prompt templates are not implemented"},
    {kR, "conversation", kNo, "conversations are not implemented; use previous_response_id"},
    {kR, "stream_options", kNo, "no stream options are implemented"},
};

constexpr std::array<RefusedRole, 1> kRefusedRoles = {{
    {"function", "function calling is not implemented; use tools and role \"tool\""},
}};

// "developer" is OpenAI's newer name for "system"; the parser maps it.
constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant", "tool"};

std::string ScopeNames(uint8_t scopes) {
  std::string out;
  auto add = [&](ParamScope s, std::string_view name) {
    if ((scopes & static_cast<uint8_t>(s)) == 0) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(ParamScope::kCompletion, "completions");
  add(ParamScope::kChat, "chat");
  add(ParamScope::kMessage, "chat message");
  add(ParamScope::kGrpc, "gRPC");
  add(ParamScope::kResponses, "responses");
  return out;
}

}  // namespace

std::span<const RequestField> RequestFields() { return kFields; }
std::span<const RefusedRole> RefusedRoles() { return kRefusedRoles; }
std::span<const std::string_view> SupportedRoles() { return kRoles; }

const RequestField* FindRequestField(ParamScope scope, std::string_view name) {
  for (const RequestField& f : kFields) {
    if (f.in(scope) && f.name == name) return &f;
  }
  return nullptr;
}

const RefusedMember* FindRefusedMember(ParamScope scope, std::string_view name) {
  const RequestField* f = FindRequestField(scope, name);
  return f != nullptr && f->status == FieldStatus::kRefused ? f : nullptr;
}

const RefusedRole* FindRefusedRole(std::string_view role) {
  for (const RefusedRole& r : kRefusedRoles) {
    if (r.role == role) return &r;
  }
  return nullptr;
}

bool IsSupportedRole(std::string_view role) {
  for (std::string_view r : kRoles) {
    if (r == role) return true;
  }
  return false;
}

std::string FieldTableMarkdown() {
  std::string out =
      "| field | where | status | effect, or why refused | accepted as not asked |\n"
      "|---|---|---|---|---|\n";
  for (const RequestField& f : kFields) {
    std::string_view status = f.status == FieldStatus::kHonoured  ? "honoured"
                              : f.status == FieldStatus::kRefused ? "**refused**"
                                                                  : "hint";
    std::string dflt;
    if (f.status == FieldStatus::kRefused) {
      dflt = "`null`, `[]`, `{}`";
      if (!f.accepted_default_json.empty())
        absl::StrAppend(&dflt, ", `", base::AsAbsl(f.accepted_default_json), "`");
    }
    // A `|` inside a cell would split it.
    absl::StrAppend(&out, "| `", base::AsAbsl(f.name), "` | ", ScopeNames(f.scopes), " | ",
                    base::AsAbsl(status), " | ",
                    absl::StrReplaceAll(base::AsAbsl(f.text), {{"|", "\\|"}}), " | ", dflt, " |\n");
  }
  return out;
}

}  // namespace kvserve::server
