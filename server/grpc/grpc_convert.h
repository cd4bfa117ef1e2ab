// kvserve.v1 protobuf messages ⇄ the protocol-neutral types of the front end. The gRPC
// twin of openai_request_parser / openai_response_writer: it only maps fields; ranges are
// checked by request_builder for both front ends.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvserve/v1/kvserve.pb.h"
#include "server/core/frontend.h"
#include "server/core/generation_output.h"
#include "server/core/generation_request.h"

namespace kvserve::server {

absl::StatusOr<GenerationRequest> FromProto(const v1::GenerateRequest& request);
absl::StatusOr<GenerationRequest> FromProto(const v1::ChatRequest& request);
TokenizeRequest FromProto(const v1::TokenizeRequest& request);
DetokenizeRequest FromProto(const v1::DetokenizeRequest& request);

void ToProto(const std::string& request_id, const ChoiceDelta& delta, v1::GenerateChunk* chunk);
void ToProto(const UsageSummary& usage, v1::Usage* out);
void ToProto(const ChoiceResult& result, v1::Completion* out);
void ToProto(const FrontendOptions& options, v1::ListModelsResponse* out,
             const std::vector<engine::AdapterCard>& adapters = {});

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kvserve::server
