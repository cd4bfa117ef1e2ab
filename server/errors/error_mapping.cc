#include "server/errors/error_mapping.h"

#include <cctype>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "server/errors/rate_limit_status.h"

namespace kvserve::server {
namespace {

constexpr std::string_view kParamPayload = "type.kvserve.dev/param";
constexpr std::string_view kCodePayload = "type.kvserve.dev/code";

bool IsFieldChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '[' ||
         c == ']';
}

std::string_view TypeFor(int http_status) {
  switch (http_status) {
    case 400:
    case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 499: return "cancelled";
    case 503: return "service_unavailable_error";
    default: return "server_error";
  }
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kCancelled: return 499;
    default: return 500;
  }
}

}  // namespace

absl::Status FieldError(std::string_view field, std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(
      absl::StrCat(base::AsAbsl(field), ": ", base::AsAbsl(message)));
  status.SetPayload(base::AsAbsl(kParamPayload), absl::Cord(base::AsAbsl(field)));
  return status;
}

absl::Status ModelNotFound(std::string_view model) {
  absl::Status status =
      absl::NotFoundError(absl::StrCat("The model `", base::AsAbsl(model), "` does not exist."));
  status.SetPayload(base::AsAbsl(kCodePayload), absl::Cord("model_not_found"));
  return status;
}

std::string ErrorParam(const absl::Status& status) {
  if (auto payload = status.GetPayload(base::AsAbsl(kParamPayload))) {
    return std::string(*payload);
  }
  if (status.code() != absl::StatusCode::kInvalidArgument &&
      status.code() != absl::StatusCode::kOutOfRange) {
    return {};
  }
  // Engine errors follow the same "field: message" convention without the payload.
  std::string_view msg = base::AsStd(status.message());
  size_t colon = msg.find(": ");
  if (colon == std::string_view::npos || colon == 0 || colon > 64) return {};
  for (char c : msg.substr(0, colon)) {
    if (!IsFieldChar(c)) return {};
  }
  return std::string(msg.substr(0, colon));
}

HttpError ToHttpError(const absl::Status& status) {
  HttpError e;
  e.status = HttpStatusFor(status.code());
  e.type = std::string(TypeFor(e.status));
  e.message = std::string(status.message());
  if (e.message.empty()) e.message = status.ToString();
  e.param = ErrorParam(status);
  if (auto code = status.GetPayload(base::AsAbsl(kCodePayload))) e.code = std::string(*code);
  if (std::optional<RateLimitState> limited = RateLimitStateOf(status)) e.headers = RateLimitHeaders(*limited);
  return e;
}

HttpError MakeHttpError(int http_status, std::string message, std::string param) {
  HttpError e;
  e.status = http_status;
  e.type = std::string(TypeFor(http_status));
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

int ToGrpcCode(const absl::Status& status) { return static_cast<int>(status.code()); }

}  // namespace kvserve::server
