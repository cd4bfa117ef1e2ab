// JSON text -> jinja::Value (nlohmann::json stays inside this file).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "jinja/limits.h"
#include "jinja/template.h"
#include "nlohmann/json.hpp"

namespace kvserve::jinja {
namespace {

// Deeper JSON than a template may nest values is refused here rather than recursing on.
struct TooDeep {};

Value Convert(const nlohmann::ordered_json& j, int depth = 1) {
  if (depth > kMaxNesting) throw TooDeep{};
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
        return Value(static_cast<int64_t>(d));
      return Value(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& x : j) a.push_back(Convert(x, depth + 1));
      return Value(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      o.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) o.items.emplace_back(it.key(), Convert(it.value(), depth + 1));
      return Value(std::move(o));
    }
    default: return Value();
  }
}

}  // namespace

absl::StatusOr<Value> ValueFromJson(std::string_view json_text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("invalid JSON");
  try {
    return Convert(j);
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(absl::StrCat("JSON nested deeper than ", kMaxNesting, " levels"));
  }
}

}  // namespace kvserve::jinja
