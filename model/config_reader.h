// Typed, validated reads of config.json fields (model_config.cc): every error names the
// file and the field. Internal to model/; nlohmann::json stays out of public headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "nlohmann/json.hpp"

namespace kvserve::model::internal {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string_view origin, std::string prefix = "")
      : j_(j), origin_(origin), prefix_(std::move(prefix)) {}

  absl::Status Error(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin_), ": ", prefix_, base::AsAbsl(field), ": ",
                                                   base::AsAbsl(what)));
  }
  bool Has(const char* field) const { return j_.contains(field) && !j_.at(field).is_null(); }
  const nlohmann::json& At(const char* field) const { return j_.at(field); }

  // Integer field; `fallback` empty means required.
  absl::StatusOr<int64_t> Int(const char* field, std::optional<int64_t> fallback, int64_t min_value = 1) const {
    if (!Has(field)) {
      if (fallback) return *fallback;
      return Error(field, "missing (required)");
    }
    const nlohmann::json& v = j_.at(field);
    if (!v.is_number_integer()) return Error(field, absl::StrCat("expected an integer, got ", v.dump()));
    const int64_t x = v.get<int64_t>();
    if (x < min_value) return Error(field, absl::StrCat("must be >= ", min_value, ", got ", x));
    if (x > (int64_t{1} << 40)) return Error(field, absl::StrCat("implausibly large: ", x));
    return x;
  }
  absl::StatusOr<double> Number(const char* field, double fallback) const {
    if (!Has(field)) return fallback;
    const nlohmann::json& v = j_.at(field);
    if (!v.is_number()) return Error(field, absl::StrCat("expected a number, got ", v.dump()));
    const double x = v.get<double>();
    if (!std::isfinite(x)) return Error(field, "must be finite");
    return x;
  }
  absl::StatusOr<bool> Bool(const char* field, bool fallback) const {
    if (!Has(field)) return fallback;
    const nlohmann::json& v = j_.at(field);
    if (!v.is_boolean()) return Error(field, absl::StrCat("expected true or false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const char* field, std::string fallback) const {
    if (!Has(field)) return fallback;
    const nlohmann::json& v = j_.at(field);
    if (!v.is_string()) return Error(field, absl::StrCat("expected a string, got ", v.dump()));
    return v.get<std::string>();
  }
  absl::StatusOr<std::vector<double>> Numbers(const char* field) const {
    if (!Has(field) || !j_.at(field).is_array()) return Error(field, "expected a list of numbers");
    std::vector<double> out;
    for (const nlohmann::json& v : j_.at(field)) {
      if (!v.is_number() || !std::isfinite(v.get<double>())) return Error(field, "expected a list of numbers");
      out.push_back(v.get<double>());
    }
    return out;
  }

 private:
  const nlohmann::json& j_;
  std::string_view origin_;
  std::string prefix_;
};

}  // namespace kvserve::model::internal
