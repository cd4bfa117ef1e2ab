// A chat generation rendered as an OpenAI Response: the output items (reasoning, message,
// function_call) built from the chat path's deltas, the streaming events that announce them,
// and the final Response object. One writer per response, on one thread.
//
// Streaming event order (every event carries sequence_number 0, 1, 2, ...):
//   response.created, response.in_progress
//   per reasoning item: output_item.added, content_part.added, reasoning_text.delta*,
//     reasoning_text.done, content_part.done, output_item.done
//   per message item: output_item.added, content_part.added, output_text.delta*,
//     output_text.done, content_part.done, output_item.done
//   per function call: output_item.added, function_call_arguments.delta,
//     function_call_arguments.done, output_item.done
//   response.completed | response.incomplete (max_output_tokens) | response.failed
// The chat output parser sends reasoning before content and tool calls with the final delta,
// so items open in that order and an open item is closed before the next one opens. A
// response with no text and no calls still has one (empty) message item.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/core/generation_output.h"

namespace kvserve::server {

struct ResponseHeader {
  std::string id;          // "resp_..."
  int64_t created_at = 0;  // Unix seconds
  std::string model;
  std::string echo_json;  // ResponsesRequest::echo_json
};

class ResponsesEventWriter {
 public:
  explicit ResponsesEventWriter(ResponseHeader header);

  // response.created and response.in_progress (streaming only).
  void Start(std::string& out);
  // Folds one delta of choice 0 in; `out` (streaming) gets the events, nullptr: none.
  void Add(const ChoiceDelta& delta, std::string* out);
  // Closes open items and returns the final Response object (JSON); `out` gets the closing
  // events and response.completed / response.incomplete.
  std::string Finish(const UsageSummary& usage, std::string* out);
  // A failed generation: response.failed with the error (streaming), and the Response object.
  std::string Fail(const std::string& message, std::string* out);

  // The response's output as chat messages (JSON array text, one assistant message): what a
  // later previous_response_id continues from.
  std::string AssistantMessagesJson() const;

 private:
  enum class Kind { kReasoning, kMessage, kFunctionCall };
  struct Item {
    Kind kind = Kind::kMessage;
    std::string id;
    std::string text;     // reasoning or output text
    std::string call_id;  // function calls
    std::string name;
    std::string arguments;
    bool done = false;
  };

  void Open(Kind kind, std::string* out);
  void CloseOpen(std::string* out);
  std::string ResponseJson(std::string_view status, const UsageSummary* usage,
                           std::string_view error_message) const;

  ResponseHeader header_;
  std::vector<Item> items_;
  std::optional<size_t> open_;  // index of the item still streaming
  std::optional<engine::FinishReason> finish_;
  int64_t sequence_ = 0;
  int next_item_ = 0;
};

}  // namespace kvserve::server
