// Tool calling over gRPC: kvserve.v1 ChatRequest.tools / tool_choice / parallel_tool_calls and
// ChatMessage.tool_calls / tool_call_id → the same ChatOptions and ChatMessage members the
// OpenAI parser fills (so templates, grammars and output parsing are shared), and parsed calls
// back to v1::ToolCall. Kept apart from grpc_convert.cc, which maps the plain fields.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "chat/tool_call_parser.h"
#include "kvserve/v1/kvserve.pb.h"
#include "server/core/generation_request.h"

namespace kvserve::server {

// Messages (with their tool members) and the request's tools into `r`. Errors name the field
// (messages[i].tool_call_id, tools[i].parameters, tool_choice.function, ...).
absl::Status ApplyChatTools(const v1::ChatRequest& request, GenerationRequest& r);

// Converts messages only (Tokenize's chat input).
absl::StatusOr<std::vector<ChatMessage>> MessagesFromProto(
    const google::protobuf::RepeatedPtrField<v1::ChatMessage>& messages);

void ToProto(const std::vector<chat::ToolCall>& calls, google::protobuf::RepeatedPtrField<v1::ToolCall>* out);

}  // namespace kvserve::server
