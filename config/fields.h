// The field table: one entry per configurable value, shared by the JSON loader, the
// KVSERVE_* environment overrides, the CLI flags, `config --dump` and the docs. Adding
// a setting means adding one line in fields.cc; every source then knows it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvserve::config {

enum class FieldKind { kBool, kInt, kBytes, kDouble, kString, kEnum, kEnumList, kStringList };

// A decoded value before it is stored. kBytes and kInt hold int64_t.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;

template <typename Root>
struct Field {
  std::string path;          // "cache.block_size" (tenant fields: "name", "weight", ...)
  FieldKind kind;
  std::string help;          // one line, for --help and docs/configuration.md
  std::string allowed;       // human text of the allowed range, used in errors
  std::vector<std::string> choices;  // kEnum / kEnumList
  bool secret = false;       // redacted in dumps and never logged
  std::function<Value(const Root&)> get;
  // Stores `v`; returns std::nullopt or the reason it is not allowed.
  std::function<std::optional<std::string>(Root&, const Value&)> set;
};

const std::vector<Field<Config>>& ConfigFields();
const std::vector<Field<TenantConfig>>& TenantFields();

// "cache.block_size" -> "KVSERVE_CACHE_BLOCK_SIZE".
std::string EnvNameFor(const std::string& path);

// Parses the textual form of a value (environment variable, CLI flag).
// Bytes accept suffixes: 512MiB, 2GiB, 64K. Lists are comma-separated.
absl::StatusOr<Value> ParseText(FieldKind kind, const std::string& text);
std::string FormatValue(const Value& v);

// Enum names, shared with the rest of the tree (e.g. "triattention").
std::string_view Name(LogLevel v);
std::string_view Name(LogFormat v);
std::string_view Name(Backend v);
std::string_view Name(KvDtype v);
std::string_view Name(QueuePolicy v);
std::string_view Name(PreemptionMode v);
std::string_view Name(CompressionPolicyKind v);
std::string_view Name(MetricsCompat v);
std::optional<CompressionPolicyKind> ParseCompressionPolicy(std::string_view name);
std::optional<KvDtype> ParseKvDtype(std::string_view name);

// Closest candidate by edit distance, if it is close enough to be a plausible typo.
std::optional<std::string> DidYouMean(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace kvserve::config
