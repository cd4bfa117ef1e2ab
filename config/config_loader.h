// Builds the effective Config from its sources and validates it.
// Every error names the field, the bad value and what is allowed, e.g.
//   cache.block_size=12: must be a power of two in [8,128]
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvserve::config {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct ConfigSources {
  std::string file_path;  // JSON file; empty: none
  KeyValues env;          // KVSERVE_* variables (name, value); see EnvFromEnviron
  KeyValues overrides;    // CLI flags as (field path, text), applied last
  // Looks up any environment variable (tenants[].api_keys_env names one); null: none is set.
  // See EnvLookupFromEnviron.
  std::function<std::optional<std::string>(const std::string&)> lookup_env;
};

absl::StatusOr<Config> LoadConfig(const ConfigSources& sources);

// Applies a JSON document on top of `cfg`. `origin` names the source in errors.
absl::Status ApplyJson(std::string_view json_text, std::string_view origin, Config& cfg);
// Applies one textual override (`path` is a field path such as "server.http_port").
absl::Status ApplyText(const std::string& path, const std::string& text, std::string_view origin,
                       Config& cfg);
// Cross-field checks that no single field can make.
absl::Status Validate(const Config& cfg);
// Fills settings the configuration left open whose default depends on others, noting each in
// cfg.derived (LoadConfig calls it after Validate): today the host prefix tier
// (cache.host_cache_bytes = cache.kv_bytes) when a remote KV tier is named without one.
void DeriveDefaults(Config& cfg);

// The effective config as pretty JSON; secrets (API keys) are redacted.
std::string DumpJson(const Config& cfg);

// Picks the KVSERVE_* entries out of a process environment block (the only place in
// the tree that looks at the environment; main passes `environ`).
KeyValues EnvFromEnviron(char** envp);
// A lookup of any variable of a process environment block (for ConfigSources::lookup_env).
std::function<std::optional<std::string>(const std::string&)> EnvLookupFromEnviron(char** envp);

// Environment variables with a meaning other than a field.
inline constexpr std::string_view kConfigFileEnv = "KVSERVE_CONFIG";

}  // namespace kvserve::config
