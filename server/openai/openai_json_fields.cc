#include "server/openai/openai_json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {

std::string Path(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : absl::StrCat(base::AsAbsl(prefix), ".", base::AsAbsl(key));
}

absl::Status TypeError(std::string_view field, std::string_view expected, const OpenAiJson& got) {
  return FieldError(field, absl::StrCat("expected ", base::AsAbsl(expected), ", got ",
                                        got.type_name()));
}

const OpenAiJson* Member(const OpenAiJson& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<OpenAiJson> ParseObject(std::string_view body) {
  OpenAiJson doc = OpenAiJson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!doc.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  return doc;
}

absl::StatusOr<int64_t> AsInt(const OpenAiJson& v, std::string_view field) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(field, "integer out of range");
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return TypeError(field, "an integer", v);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const OpenAiJson& obj, std::string_view key,
                                              std::string_view prefix) {
  const OpenAiJson* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  KVS_ASSIGN_OR_RETURN(int64_t i, AsInt(*v, Path(prefix, key)));
  return i;
}

absl::StatusOr<std::optional<double>> GetNumber(const OpenAiJson& obj, std::string_view key,
                                                std::string_view prefix) {
  const OpenAiJson* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return TypeError(Path(prefix, key), "a number", *v);
  return v->get<double>();
}

absl::StatusOr<std::optional<bool>> GetBool(const OpenAiJson& obj, std::string_view key,
                                            std::string_view prefix) {
  const OpenAiJson* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return TypeError(Path(prefix, key), "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> GetString(const OpenAiJson& obj, std::string_view key,
                                                     std::string_view prefix) {
  const OpenAiJson* v = Member(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return TypeError(Path(prefix, key), "a string", *v);
  return v->get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> AsTokenIds(const OpenAiJson& v, std::string_view field) {
  if (!v.is_array()) return TypeError(field, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const OpenAiJson& e : v) {
    if (!e.is_number_integer()) return TypeError(field, "an array of integers", e);
    int64_t id = e.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      return FieldError(field, absl::StrCat("token id ", id, " out of range"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::Status ReadOptionalFields(const OpenAiJson& obj, std::initializer_list<OptionalField> fields) {
  for (const OptionalField& f : fields) {
    if (bool* const* b = std::get_if<bool*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetBool(obj, f.key));
      if (v) **b = *v;
    } else if (std::string* const* str = std::get_if<std::string*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetString(obj, f.key));
      if (v && *str != nullptr) **str = *std::move(v);
    } else if (float* const* x = std::get_if<float*>(&f.dst)) {
      KVS_ASSIGN_OR_RETURN(auto v, GetNumber(obj, f.key));
      if (v) **x = static_cast<float>(*v);
    } else {
      KVS_ASSIGN_OR_RETURN(auto v, GetInt(obj, f.key));
      if (!v) continue;
      if (int64_t* const* i = std::get_if<int64_t*>(&f.dst)) {
        **i = *v;
      } else {
        *std::get<std::optional<int64_t>*>(f.dst) = *v;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::server
