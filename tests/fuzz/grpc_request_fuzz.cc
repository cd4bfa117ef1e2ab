// libFuzzer target: the gRPC front end's request path without a network: arbitrary bytes
// parsed as a kvserve.v1 request (the first byte picks Generate, Chat, Tokenize or Detokenize),
// converted by grpc_convert (FromProto), then checked and tokenized by request_builder
// (BuildRequests) over a byte-level fake codec. Conversion and building either succeed or
// give a clean InvalidArgument / NotFound (model name) / PermissionDenied (tenant policy);
// an accepted request must respect the limits it was checked against. Nothing may crash,
// leak or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "kvserve/v1/kvserve.pb.h"
#include "server/core/request_builder.h"
#include "server/core/text_codec.h"
#include "server/grpc/grpc_convert.h"

namespace {

using kvserve::server::ChatMessage;

// Text is its bytes (vocabulary 256 + 2 special ids); chat renders "role: content\n".
class ByteCodec final : public kvserve::server::TextCodec {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(256);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string Decode(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t id : ids)
      if (id >= 0 && id < 256) s.push_back(static_cast<char>(id));
    return s;
  }
  std::string TokenText(int32_t id) const override { return Decode({&id, 1}, false); }
  std::unique_ptr<kvserve::server::TextStreamDecoder> NewStreamDecoder(bool, bool) const override {
    return nullptr;  // not used by request building
  }
  absl::StatusOr<kvserve::server::ChatPrompt> EncodeChat(std::span<const ChatMessage> messages,
                                                         const kvserve::server::ChatPromptOptions& options) const override {
    kvserve::server::ChatPrompt prompt;
    for (const ChatMessage& m : messages) prompt.text += m.role + ": " + m.content + "\n";
    if (options.add_generation_prompt) prompt.text += "assistant: ";
    auto ids = Encode(prompt.text, true);
    if (!ids.ok()) return ids.status();
    prompt.ids = std::move(*ids);
    return prompt;
  }
  int32_t vocab_size() const override { return 258; }
};

bool Clean(const absl::Status& st) {
  return st.ok() || st.code() == absl::StatusCode::kInvalidArgument ||
         st.code() == absl::StatusCode::kNotFound || st.code() == absl::StatusCode::kPermissionDenied;
}

void Build(const absl::StatusOr<kvserve::server::GenerationRequest>& converted) {
  if (!Clean(converted.status())) __builtin_trap();
  if (!converted.ok()) return;
  static const ByteCodec codec;
  kvserve::server::ModelLimits limits;
  limits.served_model_name = "kvs-tiny";
  limits.max_model_len = 512;
  limits.requests.max_prompts = 4;
  limits.requests.max_n = 4;
  limits.requests.max_messages = 16;
  kvserve::config::TenantConfig tenant;
  tenant.name = "fuzz";
  auto built = kvserve::server::BuildRequests(*converted, &tenant, codec, limits, "req-1");
  if (!Clean(built.status())) __builtin_trap();
  if (!built.ok()) return;
  if (built->empty() || built->size() > 4) __builtin_trap();
  for (const auto& p : *built) {
    if (p.spec.prompt_tokens.empty() || static_cast<int64_t>(p.spec.prompt_tokens.size()) > limits.max_model_len)
      __builtin_trap();
    for (int32_t id : p.spec.prompt_tokens)
      if (id < 0 || id >= codec.vocab_size()) __builtin_trap();
  }
}

}  // namespace

// Invalid UTF-8 in a proto3 string fails the parse (as on the wire) and protobuf logs each
// one; silence the log so the fuzzer is not slowed down by it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const void* body = data + 1;
  const int len = static_cast<int>(size - 1);
  switch (data[0] % 4) {
    case 0: {
      kvserve::v1::GenerateRequest r;
      if (r.ParseFromArray(body, len)) Build(kvserve::server::FromProto(r));
      break;
    }
    case 1: {
      kvserve::v1::ChatRequest r;
      if (r.ParseFromArray(body, len)) Build(kvserve::server::FromProto(r));
      break;
    }
    case 2: {
      kvserve::v1::TokenizeRequest r;
      if (r.ParseFromArray(body, len)) (void)kvserve::server::FromProto(r);
      break;
    }
    case 3: {
      kvserve::v1::DetokenizeRequest r;
      if (r.ParseFromArray(body, len)) (void)kvserve::server::FromProto(r);
      break;
    }
  }
  return 0;
}
