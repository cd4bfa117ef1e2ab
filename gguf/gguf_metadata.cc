// GgufModel's typed metadata getters. GGUF writers disagree on integer widths (counts are
// u32 in most files, u64 in some, split.no is u16), so every integer type is read as int64
// and floats as double; only a value that cannot be represented (a u64 above 2^63 - 1) or a
// different kind of value (a string where a number was expected) is an error, which names
// the key and both types.
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "gguf/gguf_file.h"

namespace kvserve::gguf {
namespace {

bool IsInteger(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}
bool IsFloat(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

}  // namespace

namespace {
absl::Status WrongType(const std::string& where, std::string_view key, const Value& v,
                       std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": metadata key \"", base::AsAbsl(key),
                                                 "\" has type ", DescribeValueType(v),
                                                 ", expected ", base::AsAbsl(expected)));
}
absl::Status Missing(const std::string& where, std::string_view key) {
  return absl::NotFoundError(
      absl::StrCat(where, ": metadata key \"", base::AsAbsl(key), "\" is missing"));
}
absl::Status TooLarge(const std::string& where, std::string_view key, uint64_t v) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": metadata key \"", base::AsAbsl(key),
                                                 "\" holds ", v, ", beyond the int64 range"));
}
}  // namespace

absl::StatusOr<std::string> GgufModel::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (v->type != ValueType::kString) return WrongType(description_, key, *v, "string");
  return std::get<std::string>(v->v);
}

absl::StatusOr<int64_t> GgufModel::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (!IsInteger(v->type)) return WrongType(description_, key, *v, "an integer");
  if (const auto* s = std::get_if<int64_t>(&v->v)) return *s;
  const uint64_t u = std::get<uint64_t>(v->v);
  if (u > kMaxInt64) return TooLarge(description_, key, u);
  return static_cast<int64_t>(u);
}

absl::StatusOr<double> GgufModel::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (IsFloat(v->type)) return std::get<double>(v->v);
  if (!IsInteger(v->type)) return WrongType(description_, key, *v, "a number");
  if (const auto* s = std::get_if<int64_t>(&v->v)) return static_cast<double>(*s);
  return static_cast<double>(std::get<uint64_t>(v->v));
}

absl::StatusOr<bool> GgufModel::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (v->type != ValueType::kBool) return WrongType(description_, key, *v, "bool");
  return std::get<bool>(v->v);
}

absl::StatusOr<std::vector<std::string>> GgufModel::GetStrings(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (v->type != ValueType::kArray || v->array_type != ValueType::kString) {
    return WrongType(description_, key, *v, "array of string");
  }
  return std::get<std::vector<std::string>>(v->v);
}

absl::StatusOr<std::vector<double>> GgufModel::GetFloats(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (v->type != ValueType::kArray || !(IsFloat(v->array_type) || IsInteger(v->array_type))) {
    return WrongType(description_, key, *v, "array of numbers");
  }
  if (const auto* f = std::get_if<std::vector<double>>(&v->v)) return *f;
  std::vector<double> out;
  if (const auto* s = std::get_if<std::vector<int64_t>>(&v->v)) {
    out.assign(s->begin(), s->end());
  } else {
    const auto& u = std::get<std::vector<uint64_t>>(v->v);
    out.reserve(u.size());
    for (uint64_t x : u) out.push_back(static_cast<double>(x));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufModel::GetInts(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(description_, key);
  if (v->type != ValueType::kArray || !IsInteger(v->array_type)) {
    return WrongType(description_, key, *v, "array of integers");
  }
  if (const auto* s = std::get_if<std::vector<int64_t>>(&v->v)) return *s;
  const auto& u = std::get<std::vector<uint64_t>>(v->v);
  std::vector<int64_t> out;
  out.reserve(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] > kMaxInt64)
      return TooLarge(description_, absl::StrCat(base::AsAbsl(key), "[", i, "]"), u[i]);
    out.push_back(static_cast<int64_t>(u[i]));
  }
  return out;
}

}  // namespace kvserve::gguf
