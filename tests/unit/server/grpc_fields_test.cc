// The gRPC half of the field walk (issue 30): every field of the kvserve.v1 request messages
// (GenerateRequest, ChatRequest and every message they contain) is a row of the request field
// table, and every gRPC row is a field of the proto. grpc_convert.cc reads each of them (the
// effects are walked over real calls in grpc_frontend_test.cc).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "kvserve/v1/kvserve.pb.h"
#include "server/openai/openai_param_support.h"

namespace kvserve::server {
namespace {

namespace pb = google::protobuf;

// "<Message>.<field>" for every field reachable from `d`; map entries are one field.
void Collect(const pb::Descriptor* d, std::set<std::string>& seen_messages,
             std::set<std::string>& out) {
  if (!seen_messages.insert(std::string(d->full_name())).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    out.insert(std::string(d->name()) + "." + std::string(f->name()));
    if (f->message_type() != nullptr && !f->is_map())
      Collect(f->message_type(), seen_messages, out);
  }
}

TEST(GrpcRequestFieldsTest, EveryProtoFieldIsARowAndBack) {
  std::set<std::string> seen, proto_fields;
  Collect(v1::GenerateRequest::descriptor(), seen, proto_fields);
  Collect(v1::ChatRequest::descriptor(), seen, proto_fields);
  ASSERT_GT(proto_fields.size(), 40u);
  for (const std::string& f : proto_fields) {
    const RequestField* row = FindRequestField(ParamScope::kGrpc, f);
    ASSERT_NE(row, nullptr)
        << f << " is not in the request field table (server/openai/openai_param_support.cc)";
    EXPECT_NE(row->status, FieldStatus::kHint) << f;
  }
  for (const RequestField& row : RequestFields()) {
    if (row.in(ParamScope::kGrpc)) {
      EXPECT_TRUE(proto_fields.count(std::string(row.name)))
          << row.name << " is not a request field of the proto";
    }
  }
}

}  // namespace
}  // namespace kvserve::server
