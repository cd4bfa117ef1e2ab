#include "config/config_loader.h"

#include <cmath>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "config/fields.h"
#include "nlohmann/json.hpp"

namespace kvserve::config {
namespace {

using Json = nlohmann::json;

std::string Shown(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Converts a JSON value to a field Value, or explains the type mismatch.
absl::StatusOr<Value> FromJson(FieldKind kind, const Json& j, const std::string& allowed) {
  switch (kind) {
    case FieldKind::kBool:
      if (j.is_boolean()) return Value{j.get<bool>()};
      return absl::InvalidArgumentError("must be true or false");
    case FieldKind::kInt:
      if (j.is_number_integer()) return Value{j.get<int64_t>()};
      if (j.is_number_float()) {
        double d = j.get<double>();
        // In range before the cast (a float beyond int64 is UB to convert; found by
        // config_json_fuzz), then integral.
        if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return Value{static_cast<int64_t>(d)};
      }
      return absl::InvalidArgumentError(allowed);
    case FieldKind::kBytes:
      if (j.is_number_integer()) return Value{j.get<int64_t>()};
      if (j.is_string()) return ParseText(kind, j.get<std::string>());
      return absl::InvalidArgumentError("must be a byte count such as 268435456 or \"256MiB\"");
    case FieldKind::kDouble:
      if (j.is_number()) return Value{j.get<double>()};
      return absl::InvalidArgumentError(allowed);
    case FieldKind::kString:
      if (j.is_string()) return Value{j.get<std::string>()};
      return absl::InvalidArgumentError("must be a string");
    case FieldKind::kEnum:
      if (j.is_string()) return Value{j.get<std::string>()};
      return absl::InvalidArgumentError(allowed);
    case FieldKind::kEnumList:
    case FieldKind::kStringList: {
      if (!j.is_array()) return absl::InvalidArgumentError(allowed);
      std::vector<std::string> out;
      for (const auto& e : j) {
        if (!e.is_string()) return absl::InvalidArgumentError(allowed);
        out.push_back(e.get<std::string>());
      }
      return Value{out};
    }
  }
  return absl::InternalError("unknown field kind");
}

Json ToJson(const Value& v, bool secret) {
  struct Visitor {
    bool secret;
    Json operator()(bool b) const { return b; }
    Json operator()(int64_t i) const { return i; }
    Json operator()(double d) const { return d; }
    Json operator()(const std::string& s) const { return secret && !s.empty() ? Json("<redacted>") : Json(s); }
    Json operator()(const std::vector<std::string>& l) const {
      Json a = Json::array();
      for (const auto& s : l) a.push_back(secret ? "<redacted>" : s);
      return a;
    }
  };
  return std::visit(Visitor{secret}, v);
}

template <typename Root>
absl::Status SetField(const Field<Root>& field, Root& root, const Value& v, const std::string& shown,
                      std::string_view prefix, std::string_view origin) {
  if (auto why = field.set(root, v)) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": ", base::AsAbsl(prefix),
                                                   field.path, "=", shown, ": ", *why));
  }
  return absl::OkStatus();
}

template <typename Root>
const Field<Root>* FindField(const std::vector<Field<Root>>& fields, const std::string& path) {
  for (const auto& f : fields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

template <typename Root>
std::vector<std::string> Paths(const std::vector<Field<Root>>& fields) {
  std::vector<std::string> out;
  for (const auto& f : fields) out.push_back(f.path);
  return out;
}

absl::Status UnknownKey(std::string_view origin, const std::string& key,
                        const std::vector<std::string>& candidates) {
  std::string msg = absl::StrCat(base::AsAbsl(origin), ": unknown key '", key, "'");
  if (auto hint = DidYouMean(key, candidates)) absl::StrAppend(&msg, " (did you mean '", *hint, "'?)");
  return absl::InvalidArgumentError(msg);
}

absl::Status ApplyTenant(const Json& obj, size_t index, std::string_view origin, TenantConfig& t) {
  std::string prefix = absl::StrCat("tenants[", index, "].");
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(base::AsAbsl(origin), ": tenants[", index, "] must be an object"));
  }
  const auto& fields = TenantFields();
  for (const auto& [key, val] : obj.items()) {
    const Field<TenantConfig>* field = FindField(fields, key);
    if (field == nullptr) {
      std::vector<std::string> cands;
      for (const auto& p : Paths(fields)) cands.push_back(prefix + p);
      return UnknownKey(origin, prefix + key, cands);
    }
    std::string shown = field->secret ? "<redacted>" : Shown(val);
    auto v = FromJson(field->kind, val, field->allowed);
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": ", prefix, key, "=", shown,
                                                     ": ", v.status().message()));
    }
    auto st = SetField(*field, t, *v, shown, prefix, origin);
    if (!st.ok()) return st;
    if (key == "default_policy") t.has_default_policy = true;
  }
  return absl::OkStatus();
}

// True when `s` is non-empty and all ASCII digits.
bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The variables Kubernetes injects for every Service of the namespace (and Docker links):
//   <SVC>_SERVICE_HOST, <SVC>_SERVICE_PORT, <SVC>_SERVICE_PORT_<NAME>,
//   <SVC>_PORT=tcp://IP:PORT, <SVC>_PORT_<N>_<PROTO>, <SVC>_PORT_<N>_<PROTO>_{ADDR,PORT,PROTO}.
// A Service named kvserve (or kvserve-redis, ...) puts them under our prefix.
bool IsServiceLink(std::string_view name, std::string_view value) {
  if (name.ends_with("_SERVICE_HOST") || name.ends_with("_SERVICE_PORT") ||
      name.find("_SERVICE_PORT_") != std::string_view::npos) {
    return true;
  }
  if (name.ends_with("_PORT") &&
      (value.starts_with("tcp://") || value.starts_with("udp://") || value.starts_with("sctp://"))) {
    return true;
  }
  // ..._PORT_<N>_<PROTO>[_ADDR|_PORT|_PROTO]
  for (std::string_view proto : {"_TCP", "_UDP", "_SCTP"}) {
    size_t at = name.rfind(proto);
    if (at == std::string_view::npos) continue;
    std::string_view tail = name.substr(at + proto.size());
    if (!tail.empty() && tail != "_ADDR" && tail != "_PORT" && tail != "_PROTO") continue;
    std::string_view head = name.substr(0, at);  // ..._PORT_<N>
    size_t us = head.rfind('_');
    if (us == std::string_view::npos || !AllDigits(head.substr(us + 1))) continue;
    if (head.substr(0, us).ends_with("_PORT")) return true;
  }
  return false;
}

enum class UnknownEnv { kNotOurs, kMistyped };

// A KVSERVE_* variable that names no field is a mistake only when it plausibly meant one:
// it starts with a section name (KVSERVE_CACHE_...) or is a near miss of a field's name.
// Everything else (service links, a wrapper script's own KVSERVE_HOME, ...) is not ours
// and is ignored, so that kvserve starts inside any Kubernetes namespace. Service links
// are recognised first because KVSERVE_SERVICE_HOST is two edits from KVSERVE_SERVER_HOST.
UnknownEnv ClassifyUnknownEnv(std::string_view name, std::string_view value) {
  if (IsServiceLink(name, value)) return UnknownEnv::kNotOurs;
  std::string rest(name.substr(std::min(name.size(), std::string_view("KVSERVE_").size())));
  std::vector<std::string> env_names;
  for (const auto& f : ConfigFields()) {
    std::string section = f.path.substr(0, f.path.find('.'));
    for (char& c : section) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (rest.starts_with(section + "_")) return UnknownEnv::kMistyped;
    env_names.push_back(EnvNameFor(f.path));
  }
  if (DidYouMean(std::string(name), env_names)) return UnknownEnv::kMistyped;
  return UnknownEnv::kNotOurs;
}

}  // namespace

absl::Status ApplyJson(std::string_view json_text, std::string_view origin, Config& cfg) {
  Json doc = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false,
                         /*ignore_comments=*/true);
  if (doc.is_discarded()) {
    // Re-parse with exceptions only to get the position for the message.
    std::string detail = "invalid JSON";
    try {
      Json ignored = Json::parse(json_text.begin(), json_text.end(), nullptr, true, true);
      (void)ignored;
    } catch (const Json::exception& e) {
      // parse_error, and out_of_range for numbers beyond double (found by config_json_fuzz).
      detail = e.what();
    }
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": ", detail));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": top level must be a JSON object"));
  }
  const auto& fields = ConfigFields();
  std::vector<std::string> sections = {"tenants"};
  for (const auto& f : fields) {
    std::string s = f.path.substr(0, f.path.find('.'));
    if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
  }
  for (const auto& [section, body] : doc.items()) {
    if (section == "tenants") {
      if (!body.is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(base::AsAbsl(origin), ": tenants must be an array of objects"));
      }
      cfg.tenants.clear();
      for (size_t i = 0; i < body.size(); ++i) {
        TenantConfig t;
        KVS_RETURN_IF_ERROR(ApplyTenant(body[i], i, origin, t));
        cfg.tenants.push_back(std::move(t));
      }
      continue;
    }
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      return UnknownKey(origin, section, sections);
    }
    if (!body.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(base::AsAbsl(origin), ": ", section, " must be an object"));
    }
    for (const auto& [key, val] : body.items()) {
      std::string path = absl::StrCat(section, ".", key);
      const Field<Config>* field = FindField(fields, path);
      if (field == nullptr) return UnknownKey(origin, path, Paths(fields));
      std::string shown = field->secret ? "<redacted>" : Shown(val);
      // lora.adapters also takes an object {name: path} (vLLM's name=path pairs).
      Json pairs = Json::array();
      if (path == "lora.adapters" && val.is_object()) {
        for (const auto& [name, dir] : val.items()) {
          if (!dir.is_string()) {
            return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": lora.adapters.",
                                                           name,
                                                           ": must be a directory path (string)"));
          }
          pairs.push_back(absl::StrCat(name, "=", dir.get<std::string>()));
        }
      }
      auto v = FromJson(field->kind, pairs.empty() ? val : pairs, field->allowed);
      if (!v.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(base::AsAbsl(origin), ": ", path, "=", shown, ": ", v.status().message()));
      }
      KVS_RETURN_IF_ERROR(SetField(*field, cfg, *v, shown, "", origin));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyText(const std::string& path_in, const std::string& text, std::string_view origin,
                       Config& cfg) {
  const auto& fields = ConfigFields();
  // "<list field>+": append one entry (e.g. `--lora name=path`, repeatable) instead of replacing.
  const bool append = path_in.ends_with("+");
  const std::string path = append ? path_in.substr(0, path_in.size() - 1) : path_in;
  const Field<Config>* field = FindField(fields, path);
  if (field == nullptr) return UnknownKey(origin, path, Paths(fields));
  std::string shown = field->secret ? "<redacted>" : text;
  if (append && field->kind == FieldKind::kStringList) {
    auto list = std::get<std::vector<std::string>>(field->get(cfg));
    list.push_back(text);
    return SetField(*field, cfg, Value{std::move(list)}, shown, "", origin);
  }
  auto v = ParseText(field->kind, text);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(base::AsAbsl(origin), ": ", path, "=", shown, ": ", v.status().message()));
  }
  return SetField(*field, cfg, *v, shown, "", origin);
}

namespace {

// Bits per element of a KV dtype (int4: 4), for ordering precisions.
int DtypeBits(KvDtype d) {
  switch (d) {
    case KvDtype::kFp32: return 32;
    case KvDtype::kFp16:
    case KvDtype::kBf16: return 16;
    case KvDtype::kFp8E4M3:
    case KvDtype::kInt8: return 8;
    case KvDtype::kInt4: return 4;
  }
  return 32;
}

absl::Status ValidateDemoteTiers(const CacheConfig& c) {
  auto err = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (c.demote_kv_bytes >= c.kv_bytes) {
    return err("cache.demote_kv_bytes=", c.demote_kv_bytes, ": must be below cache.kv_bytes (", c.kv_bytes,
               "), of which it is a part");
  }
  const size_t lowrank = c.lowrank_key_rank > 0 ? 1 : 0;
  if (c.demote_dtypes.size() + lowrank == 0 || c.demote_dtypes.size() + lowrank > 7) {
    return err("cache.demote_dtypes: needs 1 to 7 tiers (with the low-rank one, cache.lowrank_key_rank) when "
               "cache.demote_kv_bytes > 0");
  }
  const int pool_bits = std::min(DtypeBits(EffectiveKDtype(c)), DtypeBits(EffectiveVDtype(c)));
  int prev = pool_bits;
  for (KvDtype d : c.demote_dtypes) {
    if (DtypeBits(d) >= prev) {
      return err("cache.demote_dtypes: ", base::AsAbsl(Name(d)), " must have fewer bits than the pool's K and V (",
                 pool_bits, ") and than the tier before it: list the tiers from highest precision to lowest");
    }
    prev = DtypeBits(d);
  }
  return absl::OkStatus();
}

// A tenant's compression defaults: a budget that holds the window and sinks, and default
// precisions that the pool holds and the tenant may use.
absl::Status ValidateTenantCompression(const Config& cfg, const TenantConfig& t, size_t i) {
  auto err = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (t.budget != 0 && t.budget < 8) {
    return err("tenants[", i, "].budget=", t.budget, ": must be 0 (inherit compression.budget) or at least 8");
  }
  const CompressionConfig c = EffectiveCompression(cfg, &t);
  if ((t.budget > 0 || t.window >= 0) && c.window + c.sinks > c.budget) {
    return err("tenants[", i, "].budget=", c.budget, t.budget > 0 ? "" : " (inherited from compression.budget)",
               ": must hold the tenant's window (", c.window, ") + compression.sinks (", c.sinks, ")");
  }
  const std::optional<KvDtype> asked[2] = {t.k_dtype, t.v_dtype};
  const KvDtype pool[2] = {EffectiveKDtype(cfg.cache), EffectiveVDtype(cfg.cache)};
  const char* const field[2] = {"k_dtype", "v_dtype"};
  const char* const side[2] = {"keys", "values"};
  for (int kv = 0; kv < 2; ++kv) {
    if (!asked[kv]) continue;
    if (!t.allowed_kv_dtypes.empty() &&
        std::find(t.allowed_kv_dtypes.begin(), t.allowed_kv_dtypes.end(), *asked[kv]) == t.allowed_kv_dtypes.end()) {
      return err("tenants[", i, "].", field[kv], "=", base::AsAbsl(Name(*asked[kv])),
                 ": must be one of the tenant's allowed_kv_dtypes");
    }
    if (*asked[kv] != pool[kv]) {
      return err("tenants[", i, "].", field[kv], "=", base::AsAbsl(Name(*asked[kv])), ": this server's KV pool stores ",
                 side[kv], " as ", base::AsAbsl(Name(pool[kv])), " (cache.", field[kv],
                 "); one precision per pool, so a tenant default can name only that");
    }
  }
  return absl::OkStatus();
}

}  // namespace

// lora.*: every adapter entry is name=path with a unique name that is not the served model's.
absl::Status ValidateLora(const Config& cfg) {
  auto err = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  const LoraConfig& l = cfg.lora;
  if (l.max_cpu_loras != 0 && l.max_cpu_loras < l.max_loras) {
    return err("lora.max_cpu_loras=", l.max_cpu_loras, ": must be 0 or at least lora.max_loras (",
               l.max_loras, ")");
  }
  std::vector<std::string_view> names;
  for (size_t i = 0; i < l.adapters.size(); ++i) {
    const std::string& e = l.adapters[i];
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == e.size()) {
      return err("lora.adapters[", i, "]=\"", e, "\": must be name=path");
    }
    const std::string_view name = std::string_view(e).substr(0, eq);
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return err("lora.adapters[", i, "]: the name '", base::AsAbsl(name), "' is listed twice");
    }
    if (name == cfg.model.served_name) {
      return err("lora.adapters[", i, "]: the name '", base::AsAbsl(name),
                 "' is the served model's (model.served_name)");
    }
    names.push_back(name);
  }
  if (l.active() && cfg.engine.backend == Backend::kCuda) {
    return err(
        "lora.adapters: the CUDA backend does not run LoRA adapters yet (engine.backend=cpu or "
        "auto)");
  }
  // The pipeline's step message carries no adapter rows (docs/parallelism.md).
  if (l.active() && cfg.parallel.pipeline > 1) {
    return err("lora.adapters: LoRA adapters are not served under parallel.pipeline=",
               cfg.parallel.pipeline, " yet (one process only)");
  }
  return absl::OkStatus();
}

absl::Status Validate(const Config& cfg) {
  auto err = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  const auto& c = cfg.compression;
  if (c.auto_low_watermark >= c.auto_high_watermark) {
    return err("compression.auto_low_watermark=", c.auto_low_watermark,
               ": must be below compression.auto_high_watermark=", c.auto_high_watermark);
  }
  if (c.window + c.sinks > c.budget) {
    return err("compression.budget=", c.budget, ": must hold compression.window (", c.window,
               ") + compression.sinks (", c.sinks, ")");
  }
  if (cfg.speculative.ngram_min > cfg.speculative.ngram_max) {
    return err("speculative.ngram_min=", cfg.speculative.ngram_min,
               ": must not exceed speculative.ngram_max=", cfg.speculative.ngram_max);
  }
  if (cfg.speculative.method == SpeculativeMethod::kDraft && cfg.speculative.draft_model.empty()) {
    return err("speculative.method=draft: needs speculative.draft_model (a draft model directory)");
  }
  if (cfg.cache.lowrank_key_rank > 0 && cfg.cache.demote_kv_bytes == 0) {
    return err("cache.lowrank_key_rank=", cfg.cache.lowrank_key_rank,
               ": the low-rank key tier is a demotion tier and needs cache.demote_kv_bytes > 0");
  }
  if (cfg.cache.demote_kv_bytes > 0) {
    KVS_RETURN_IF_ERROR(ValidateDemoteTiers(cfg.cache));
  }
  const auto& s = cfg.scheduler;
  if (!s.enable_chunked_prefill && cfg.model.max_model_len > s.max_num_batched_tokens) {
    return err("scheduler.max_num_batched_tokens=", s.max_num_batched_tokens,
               ": must be at least model.max_model_len (", cfg.model.max_model_len,
               ") when scheduler.enable_chunked_prefill is false");
  }
  if (cfg.server.tls_cert_path.empty() != cfg.server.tls_key_path.empty()) {
    return err("server.tls_cert_path / server.tls_key_path: give both or neither");
  }
  if (!cfg.server.tls_client_ca_path.empty() && cfg.server.tls_cert_path.empty()) {
    return err("server.tls_client_ca_path: needs server.tls_cert_path and server.tls_key_path");
  }
  if (cfg.server.http_port != 0 && cfg.server.http_port == cfg.server.grpc_port) {
    return err("server.grpc_port=", cfg.server.grpc_port, ": must differ from server.http_port");
  }
  KVS_RETURN_IF_ERROR(ValidateLora(cfg));
  std::vector<std::string> names;
  std::vector<std::string> keys;
  for (size_t i = 0; i < cfg.tenants.size(); ++i) {
    const auto& t = cfg.tenants[i];
    if (t.name.empty()) return err("tenants[", i, "].name: is required");
    if (std::find(names.begin(), names.end(), t.name) != names.end()) {
      return err("tenants[", i, "].name=\"", t.name, "\": must be unique");
    }
    names.push_back(t.name);
    for (const auto& k : t.api_keys) {
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) {
        return err("tenants[", i, "].api_keys: a key is listed twice (keys must map to one tenant)");
      }
      keys.push_back(k);
    }
    const CompressionPolicyKind effective = EffectiveDefaultPolicy(cfg, &t);
    if (!t.allowed_policies.empty() &&
        std::find(t.allowed_policies.begin(), t.allowed_policies.end(), effective) ==
            t.allowed_policies.end()) {
      return err("tenants[", i, "].default_policy=", base::AsAbsl(Name(effective)),
                 t.has_default_policy ? "" : " (inherited from compression.default_policy)",
                 ": must be one of the tenant's allowed_policies");
    }
    KVS_RETURN_IF_ERROR(ValidateTenantCompression(cfg, t, i));
  }
  return absl::OkStatus();
}

// Appends the keys of every tenant's api_keys_file and api_keys_env. Messages name the file
// or the variable, never a key.
static absl::Status LoadKeyFiles(Config& cfg, const ConfigSources& sources) {
  for (size_t i = 0; i < cfg.tenants.size(); ++i) {
    TenantConfig& t = cfg.tenants[i];
    if (!t.api_keys_env.empty()) {
      std::optional<std::string> value = sources.lookup_env ? sources.lookup_env(t.api_keys_env) : std::nullopt;
      if (!value.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("tenants[", i, "].api_keys_env=", t.api_keys_env,
                                                       ": the environment variable is not set"));
      }
      size_t added = 0;
      for (absl::string_view key : absl::StrSplit(*value, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
        t.api_keys.push_back(std::string(key));
        ++added;
      }
      if (added == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tenants[", i, "].api_keys_env=", t.api_keys_env, ": holds no key"));
      }
    }
    if (t.api_keys_file.empty()) continue;
    std::ifstream in(t.api_keys_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenants[", i, "].api_keys_file=", t.api_keys_file, ": cannot be read"));
    }
    std::string line;
    size_t added = 0;
    while (std::getline(in, line)) {
      const absl::string_view key = absl::StripAsciiWhitespace(line);
      if (key.empty()) continue;
      t.api_keys.push_back(std::string(key));
      ++added;
    }
    if (added == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenants[", i, "].api_keys_file=", t.api_keys_file, ": holds no key"));
    }
  }
  return absl::OkStatus();
}

void DeriveDefaults(Config& cfg) {
  CacheConfig& c = cfg.cache;
  // Blocks fetched from a remote KV tier land in the host prefix tier, so naming a remote tier
  // alone used to be refused at start-up. Size the host tier like the CPU KV pool
  // (cache.kv_bytes, 256 MiB by default): a prefix tier as large as the pool holds a whole
  // pool's worth of evicted prefixes, which is what a replica gains from keeping them close,
  // and it stays small enough for any host (it is host memory on the CUDA backend too).
  if (!c.remote_kv_url.empty() && c.host_cache_bytes == 0) {
    c.host_cache_bytes = c.kv_bytes;
    cfg.derived.push_back(absl::StrCat("cache.host_cache_bytes=", c.host_cache_bytes, " (",
                                       c.host_cache_bytes >> 20, " MiB, as cache.kv_bytes): cache.remote_kv_url "
                                       "names a remote KV tier, whose blocks land in the host prefix tier; set "
                                       "cache.host_cache_bytes to size it yourself"));
  }
}

absl::StatusOr<Config> LoadConfig(const ConfigSources& sources) {
  Config cfg;
  std::string file_path = sources.file_path;
  if (file_path.empty()) {
    for (const auto& [k, v] : sources.env) {
      if (k == kConfigFileEnv) file_path = v;
    }
  }
  if (!file_path.empty()) {
    std::ifstream in(file_path, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("config file ", file_path, ": cannot be read"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    KVS_RETURN_IF_ERROR(ApplyJson(ss.str(), absl::StrCat("config file ", file_path), cfg));
  }
  const auto& fields = ConfigFields();
  std::vector<std::string> env_names = {std::string(kConfigFileEnv)};
  for (const auto& f : fields) env_names.push_back(EnvNameFor(f.path));
  for (const auto& [name, value] : sources.env) {
    if (name == kConfigFileEnv) continue;
    const Field<Config>* match = nullptr;
    for (const auto& f : fields) {
      if (EnvNameFor(f.path) == name) match = &f;
    }
    if (match == nullptr) {
      if (ClassifyUnknownEnv(name, value) == UnknownEnv::kNotOurs) {
        cfg.ignored_env.push_back(name);
        continue;
      }
      std::string msg = absl::StrCat("environment: unknown variable ", name);
      if (auto hint = DidYouMean(name, env_names)) absl::StrAppend(&msg, " (did you mean ", *hint, "?)");
      return absl::InvalidArgumentError(msg);
    }
    KVS_RETURN_IF_ERROR(ApplyText(match->path, value, absl::StrCat("environment ", name), cfg));
  }
  for (const auto& [path, value] : sources.overrides) {
    KVS_RETURN_IF_ERROR(ApplyText(path, value, "command line", cfg));
  }
  KVS_RETURN_IF_ERROR(LoadKeyFiles(cfg, sources));
  KVS_RETURN_IF_ERROR(Validate(cfg));
  DeriveDefaults(cfg);
  return cfg;
}

std::string DumpJson(const Config& cfg) {
  Json doc = Json::object();
  for (const auto& f : ConfigFields()) {
    size_t dot = f.path.find('.');
    doc[f.path.substr(0, dot)][f.path.substr(dot + 1)] = ToJson(f.get(cfg), f.secret);
  }
  Json tenants = Json::array();
  for (const auto& t : cfg.tenants) {
    Json obj = Json::object();
    for (const auto& f : TenantFields()) obj[f.path] = ToJson(f.get(t), f.secret);
    if (!t.has_default_policy) obj.erase("default_policy");  // inherited, not set
    tenants.push_back(obj);
  }
  doc["tenants"] = tenants;
  return doc.dump(2);
}

std::function<std::optional<std::string>(const std::string&)> EnvLookupFromEnviron(char** envp) {
  return [envp](const std::string& name) -> std::optional<std::string> {
    if (envp == nullptr) return std::nullopt;
    for (char** e = envp; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
        return std::string(entry.substr(name.size() + 1));
      }
    }
    return std::nullopt;
  };
}

KeyValues EnvFromEnviron(char** envp) {
  KeyValues out;
  if (envp == nullptr) return out;
  for (char** e = envp; *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("KVSERVE_")) continue;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

}  // namespace kvserve::config
