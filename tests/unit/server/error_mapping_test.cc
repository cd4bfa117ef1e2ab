#include "server/errors/error_mapping.h"

#include <gtest/gtest.h>

namespace kvserve::server {
namespace {

TEST(ErrorMappingTest, FieldErrorNamesTheField) {
  absl::Status st = FieldError("kv_compression.budget", "must be >= 1");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "kv_compression.budget: must be >= 1");
  EXPECT_EQ(ErrorParam(st), "kv_compression.budget");
  HttpError e = ToHttpError(st);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "kv_compression.budget");
}

TEST(ErrorMappingTest, EngineStyleMessagesYieldTheParam) {
  EXPECT_EQ(ErrorParam(absl::InvalidArgumentError("max_tokens: too large")), "max_tokens");
  EXPECT_EQ(ErrorParam(absl::InvalidArgumentError("prompt is too long")), "");
  EXPECT_EQ(ErrorParam(absl::InvalidArgumentError("bad value: x y: z")), "");
  EXPECT_EQ(ErrorParam(absl::ResourceExhaustedError("queue: full")), "");
}

TEST(ErrorMappingTest, StatusCodesMapToHttpAndGrpc) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
  };
  for (const Case& c : {Case{absl::InvalidArgumentError("x"), 400, "invalid_request_error"},
                        Case{absl::UnauthenticatedError("x"), 401, "authentication_error"},
                        Case{absl::PermissionDeniedError("x"), 403, "permission_error"},
                        Case{absl::NotFoundError("x"), 404, "not_found_error"},
                        Case{absl::ResourceExhaustedError("x"), 429, "rate_limit_error"},
                        Case{absl::UnavailableError("x"), 503, "service_unavailable_error"},
                        Case{absl::InternalError("x"), 500, "server_error"},
                        Case{absl::UnimplementedError("x"), 500, "server_error"}}) {
    HttpError e = ToHttpError(c.status);
    EXPECT_EQ(e.status, c.http) << c.status;
    EXPECT_EQ(e.type, c.type) << c.status;
    EXPECT_EQ(e.message, "x");
    EXPECT_EQ(ToGrpcCode(c.status), static_cast<int>(c.status.code()));
  }
  EXPECT_EQ(MakeHttpError(413, "too big").type, "invalid_request_error");
}

}  // namespace
}  // namespace kvserve::server
