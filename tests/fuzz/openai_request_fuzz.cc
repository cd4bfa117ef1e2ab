// libFuzzer target: the OpenAI request parsers (completions, chat, tokenize, detokenize) on
// arbitrary bytes. Every input must give a request or a clean InvalidArgument; nothing may
// crash, leak or trip a sanitizer. The refusal table and the field errors run too, and the
// /v1/responses translation (whose chat body must then parse or be a clean 400 as well).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai/openai_request_parser.h"
#include "server/openai/responses_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto r : {kvserve::server::ParseCompletionRequest(body), kvserve::server::ParseChatRequest(body)}) {
    if (!r.ok() && r.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  }
  auto t = kvserve::server::ParseTokenizeRequest(body);
  if (!t.ok() && t.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  auto d = kvserve::server::ParseDetokenizeRequest(body);
  if (!d.ok() && d.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  // Any previous_response_id continues a stored one-message conversation.
  const kvserve::server::ConversationLookup lookup = [](const std::string&) -> std::optional<std::string> {
    return R"([{"role":"user","content":"earlier"}])";
  };
  auto resp = kvserve::server::ParseResponsesRequest(body, lookup);
  if (!resp.ok() && resp.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  if (resp.ok()) {
    auto chat = kvserve::server::ParseChatRequest(resp->chat_body);
    if (!chat.ok() && chat.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  }
  return 0;
}
