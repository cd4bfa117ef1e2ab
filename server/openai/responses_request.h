// /v1/responses request bodies → the equivalent chat completions request. The Responses API
// runs on the chat path (template rendering, tools, structured outputs, reasoning splitter):
// this file only translates, the chat parser then validates and builds the GenerationRequest.
//
//   input (string | items) ─┐
//   previous conversation ──┼─► chat `messages` (instructions first, as a system message)
//   instructions ───────────┘
//   max_output_tokens → max_tokens; text.format → response_format; tools[i] {type: function,
//   name, ...} → {type: function, function: {...}}; tool_choice {type: function, name} →
//   {type: function, function: {name}}; temperature, top_p, parallel_tool_calls, model as is.
//
// Top-level members are a closed set: openai_param_support's ParamScope::kResponses rows.
// A member in no row, or a refused row's member with a value that asks for something, is a
// 400 naming it. nlohmann::json stays inside the .cc.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::server {

struct ResponsesRequest {
  std::string chat_body;  // a chat completions request (JSON object text)
  // The conversation this request continues and adds (chat messages, JSON array text),
  // without `instructions`: what a stored response keeps for previous_response_id.
  std::string conversation_json;
  // The request members a Response object echoes (JSON object text): instructions,
  // max_output_tokens, temperature, top_p, tools, tool_choice, parallel_tool_calls, text,
  // metadata, previous_response_id, store, reasoning, truncation, user.
  std::string echo_json;
  bool stream = false;
  bool store = true;             // OpenAI's default
  bool store_requested = false;  // `store: true` was in the body
  std::string previous_response_id;
};

// The stored conversation (chat messages, JSON array text) of a previous response id, or
// nullopt when unknown/expired.
using ConversationLookup = std::function<std::optional<std::string>(const std::string& id)>;

// InvalidArgument naming the member for a bad body; NotFound (404) for an unknown
// previous_response_id.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                       const ConversationLookup& lookup);

// A chat parser error re-addressed to the Responses member it came from (max_tokens →
// max_output_tokens, response_format → text.format, messages → input); others unchanged.
absl::Status ToResponsesError(const absl::Status& chat_error);

}  // namespace kvserve::server
