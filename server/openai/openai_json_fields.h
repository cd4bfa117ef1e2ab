// Typed reads of OpenAI request members (nlohmann JSON, server/ only), shared by the request
// parsers: every error is a FieldError (server/errors/error_mapping.h) naming the member's dotted
// path, so a bad value reaches the client as a 400 whose `param` names it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::server {

// Ordered: tools, tool-call arguments and chat_template_kwargs reach the chat template in the
// order the client wrote them (`tojson` prints them so).
using OpenAiJson = nlohmann::ordered_json;

// "prefix.key", or "key" without a prefix.
std::string Path(std::string_view prefix, std::string_view key);
absl::Status TypeError(std::string_view field, std::string_view expected, const OpenAiJson& got);
// A present, non-null member, or nullptr.
const OpenAiJson* Member(const OpenAiJson& obj, std::string_view key);
// The body as a JSON object (InvalidArgument when it is not JSON or not an object).
absl::StatusOr<OpenAiJson> ParseObject(std::string_view body);
// Integers: JSON integers, or numbers with an integral value (some clients send 16.0).
absl::StatusOr<int64_t> AsInt(const OpenAiJson& v, std::string_view field);
// Absent or null members are nullopt; a present one of the wrong type is an error.
absl::StatusOr<std::optional<int64_t>> GetInt(const OpenAiJson& obj, std::string_view key,
                                              std::string_view prefix = {});
absl::StatusOr<std::optional<double>> GetNumber(const OpenAiJson& obj, std::string_view key,
                                                std::string_view prefix = {});
absl::StatusOr<std::optional<bool>> GetBool(const OpenAiJson& obj, std::string_view key,
                                            std::string_view prefix = {});
absl::StatusOr<std::optional<std::string>> GetString(const OpenAiJson& obj, std::string_view key,
                                                     std::string_view prefix = {});
absl::StatusOr<std::vector<int32_t>> AsTokenIds(const OpenAiJson& v, std::string_view field);

// A table entry for an optional member copied through when present; an absent member leaves
// the destination's default. The typed getter does the reading, so a wrong type fails with
// the getter's message. A null std::string* type-checks the member and drops it.
struct OptionalField {
  std::string_view key;
  std::variant<bool*, int64_t*, std::optional<int64_t>*, float*, std::string*> dst;
};

// Reads `fields` in order (the first bad one is the error reported).
absl::Status ReadOptionalFields(const OpenAiJson& obj, std::initializer_list<OptionalField> fields);

}  // namespace kvserve::server
