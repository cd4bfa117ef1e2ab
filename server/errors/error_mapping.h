// The one place where an absl::Status becomes an HTTP status + OpenAI error object or a
// gRPC status code. Everything below the front ends reports errors as absl::Status; a
// field error carries the offending field (OpenAI's `param`) as a payload and as the
// message prefix ("max_tokens: must be >= 1"), so the gRPC message names it too.
//
//   absl code            HTTP  OpenAI type                gRPC
//   InvalidArgument      400   invalid_request_error      INVALID_ARGUMENT
//   OutOfRange           400   invalid_request_error      OUT_OF_RANGE
//   Unauthenticated      401   authentication_error       UNAUTHENTICATED
//   PermissionDenied     403   permission_error           PERMISSION_DENIED
//   NotFound             404   not_found_error            NOT_FOUND
//   ResourceExhausted    429   rate_limit_error           RESOURCE_EXHAUSTED
//   Unavailable          503   service_unavailable_error  UNAVAILABLE
//   Cancelled            499   cancelled                  CANCELLED
//   anything else        500   server_error               (same code)
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::server {

// InvalidArgument naming `field` (dotted path such as "kv_compression.budget").
absl::Status FieldError(std::string_view field, std::string_view message);
// The field a status names: its payload, else a "field: ..." message prefix; "" if none.
std::string ErrorParam(const absl::Status& status);
// NotFound for a `model` the caller may not see (unknown, or an adapter outside its tenant's
// allow-list: the same answer, so nothing leaks): OpenAI's code "model_not_found".
absl::Status ModelNotFound(std::string_view model);

struct HttpError {
  int status = 500;
  std::string type;     // OpenAI error type
  std::string message;
  std::string param;    // empty: JSON null
  std::string code;     // OpenAI's string code (e.g. "model_not_found"); empty: the HTTP status
  // Extra response headers: a tenant rate-limit refusal's retry-after and x-ratelimit-*
  // (rate_limit_status.h).
  std::vector<std::pair<std::string, std::string>> headers;
};

HttpError ToHttpError(const absl::Status& status);
// For errors produced by the HTTP layer itself (unknown route, body too large).
HttpError MakeHttpError(int http_status, std::string message, std::string param = {});

// Numeric grpc::StatusCode for `status` (absl codes share gRPC's numbering).
int ToGrpcCode(const absl::Status& status);

}  // namespace kvserve::server
