#include "config/config_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "config/fields.h"
#include "nlohmann/json.hpp"

namespace kvserve::config {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& body) {
  char name[] = "/tmp/kvserve_cfg_XXXXXX";
  int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(name) << body;
  return name;
}

TEST(ConfigLoader, DefaultsAreValid) {
  auto cfg = LoadConfig({});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->cache.block_size, 16);
  EXPECT_EQ(cfg->server.http_port, 8000);
  EXPECT_EQ(cfg->server.grpc_port, 50051);
  EXPECT_EQ(cfg->compression.default_policy, CompressionPolicyKind::kFull);
}

TEST(ConfigLoader, PrecedenceFlagsOverEnvOverFileOverDefaults) {
  std::string path = WriteTemp(R"({"cache": {"block_size": 32, "kv_bytes": "64MiB"},
                                   "server": {"http_port": 9000, "grpc_port": 9001}})");
  ConfigSources s;
  s.file_path = path;
  auto from_file = LoadConfig(s);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->cache.block_size, 32);
  EXPECT_EQ(from_file->cache.kv_bytes, 64ull << 20);
  EXPECT_EQ(from_file->server.http_port, 9000);

  s.env = {{"KVSERVE_CACHE_BLOCK_SIZE", "64"}, {"KVSERVE_SERVER_HTTP_PORT", "9100"}};
  auto from_env = LoadConfig(s);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->cache.block_size, 64);
  EXPECT_EQ(from_env->server.http_port, 9100);
  EXPECT_EQ(from_env->server.grpc_port, 9001);  // file value kept

  s.overrides = {{"cache.block_size", "128"}};
  auto from_flags = LoadConfig(s);
  ASSERT_TRUE(from_flags.ok()) << from_flags.status();
  EXPECT_EQ(from_flags->cache.block_size, 128);
  EXPECT_EQ(from_flags->server.http_port, 9100);
  std::remove(path.c_str());
}

TEST(ConfigLoader, ConfigFileFromEnvironment) {
  std::string path = WriteTemp(R"({"scheduler": {"max_num_seqs": 7}})");
  ConfigSources s;
  s.env = {{"KVSERVE_CONFIG", path}};
  auto cfg = LoadConfig(s);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->scheduler.max_num_seqs, 7);
  std::remove(path.c_str());
}

TEST(ConfigLoader, BlockSizeMustBePowerOfTwo) {
  Config cfg;
  auto st = ApplyJson(R"({"cache": {"block_size": 12}})", "test", cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("cache.block_size=12: must be a power of two in [8,128]"));
  EXPECT_EQ(cfg.cache.block_size, 16);  // unchanged
}

TEST(ConfigLoader, OutOfRangeNamesFieldValueAndRange) {
  Config cfg;
  auto st = ApplyText("server.http_port", "70000", "command line", cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("server.http_port=70000: must be an integer in [0,65535]"));
  st = ApplyText("cache.gpu_memory_utilization", "0", "command line", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cache.gpu_memory_utilization=0: must be a number in (0,1]"));
  st = ApplyText("cache.kv_dtype", "fp4", "command line", cfg);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("cache.kv_dtype=fp4: must be one of fp32|fp16|bf16|fp8_e4m3|int8|int4"));
}

// Found by config_json_fuzz: a number beyond double used to escape as an exception.
TEST(ConfigLoader, NumberOverflowIsAnErrorNotACrash) {
  Config cfg;
  absl::Status st = ApplyJson(R"({"cache": {"kv_bytes": 1E400}})", "cfg.json", cfg);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cfg.json: "));
  EXPECT_THAT(std::string(st.message()), HasSubstr("number overflow"));
  // Also found: a finite float beyond int64 for an integer field was an undefined conversion.
  st = ApplyJson(R"({"cache": {"block_size": 3.2e90}})", "cfg.json", cfg);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cache.block_size"));
  st = ApplyJson(R"({"cache": {"block_size": 32.0}})", "cfg.json", cfg);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cfg.cache.block_size, 32);
}

TEST(ConfigLoader, WrongJsonTypeNamesField) {
  Config cfg;
  auto st = ApplyJson(R"({"scheduler": {"max_num_seqs": "many"}})", "f.json", cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("scheduler.max_num_seqs=\"many\""));
  st = ApplyJson(R"({"cache": {"enable_prefix_caching": 1}})", "f.json", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cache.enable_prefix_caching=1: must be true or false"));
}

TEST(ConfigLoader, UnknownKeyGetsDidYouMean) {
  Config cfg;
  auto st = ApplyJson(R"({"cache": {"blok_size": 16}})", "f.json", cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("unknown key 'cache.blok_size'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("did you mean 'cache.block_size'?"));
  st = ApplyJson(R"({"schedular": {}})", "f.json", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("did you mean 'scheduler'?"));
  st = ApplyJson(R"({"tenants": [{"name": "a", "wieght": 2}]})", "f.json", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("did you mean 'tenants[0].weight'?"));
}

TEST(ConfigLoader, UnknownEnvironmentVariableIsAnError) {
  ConfigSources s;
  s.env = {{"KVSERVE_CACHE_BLOKC_SIZE", "16"}};
  auto cfg = LoadConfig(s);
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("KVSERVE_CACHE_BLOCK_SIZE"));
}

// Every variable Kubernetes injects for Services named kvserve and kvserve-redis (and one
// named kvserve-server, whose prefix is a real section), with two named ports each.
KeyValues ServiceLinkEnvironment() {
  KeyValues env;
  auto service = [&env](const std::string& svc, const std::string& ip, std::vector<std::pair<std::string, int>> ports) {
    env.emplace_back(svc + "_SERVICE_HOST", ip);
    env.emplace_back(svc + "_SERVICE_PORT", std::to_string(ports[0].second));
    env.emplace_back(svc + "_PORT", "tcp://" + ip + ":" + std::to_string(ports[0].second));
    for (const auto& [port_name, port] : ports) {
      std::string p = std::to_string(port);
      env.emplace_back(svc + "_SERVICE_PORT_" + port_name, p);
      env.emplace_back(svc + "_PORT_" + p + "_TCP", "tcp://" + ip + ":" + p);
      env.emplace_back(svc + "_PORT_" + p + "_TCP_PROTO", "tcp");
      env.emplace_back(svc + "_PORT_" + p + "_TCP_PORT", p);
      env.emplace_back(svc + "_PORT_" + p + "_TCP_ADDR", ip);
    }
  };
  service("KVSERVE", "10.96.0.12", {{"HTTP", 8000}, {"GRPC", 50051}});
  service("KVSERVE_REDIS", "10.96.0.13", {{"REDIS", 6379}});
  service("KVSERVE_SERVER", "10.96.0.14", {{"HTTP", 8000}});
  return env;
}

TEST(ConfigLoader, KubernetesServiceLinkVariablesAreIgnored) {
  ConfigSources s;
  s.env = ServiceLinkEnvironment();
  const size_t links = s.env.size();
  s.env.emplace_back("KVSERVE_HOME", "/opt/kvserve");  // a wrapper script's own variable
  s.env.emplace_back("KVSERVE_CACHE_BLOCK_SIZE", "32");  // a real field still applies
  auto cfg = LoadConfig(s);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->cache.block_size, 32);
  // Defaults untouched: KVSERVE_SERVICE_HOST is not server.host, KVSERVE_PORT not a port.
  EXPECT_EQ(cfg->server.host, "127.0.0.1");
  EXPECT_EQ(cfg->server.http_port, 8000);
  EXPECT_EQ(cfg->ignored_env.size(), links + 1);
  EXPECT_THAT(cfg->ignored_env, ::testing::Contains("KVSERVE_SERVICE_HOST"));
  EXPECT_THAT(cfg->ignored_env, ::testing::Contains("KVSERVE_PORT_8000_TCP_ADDR"));
  EXPECT_THAT(cfg->ignored_env, ::testing::Contains("KVSERVE_HOME"));
}

TEST(ConfigLoader, NearMissesOfFieldsStayErrors) {
  // A section prefix or a near miss of a field's variable is a typo, not someone else's.
  for (const auto& [name, hint] : std::vector<std::pair<std::string, std::string>>{
           {"KVSERVE_CACHE_BLOKC_SIZE", "KVSERVE_CACHE_BLOCK_SIZE"},
           {"KVSERVE_SERVER_HTTP_PROT", "KVSERVE_SERVER_HTTP_PORT"},
           {"KVSERVE_SCHEDULAR_MAX_NUM_SEQS", "KVSERVE_SCHEDULER_MAX_NUM_SEQS"},
           {"KVSERVE_CACHE_NOT_A_FIELD", ""}}) {
    ConfigSources s;
    s.env = {{name, "16"}};
    auto cfg = LoadConfig(s);
    ASSERT_FALSE(cfg.ok()) << name;
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("unknown variable " + name));
    if (!hint.empty()) {
      EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(hint)) << name;
    }
  }
  // A port variable that is not a service link (no tcp:// value) is not silently dropped.
  ConfigSources s;
  s.env = {{"KVSERVE_SERVER_HTTPS_PORT", "8443"}};
  EXPECT_FALSE(LoadConfig(s).ok());
}

TEST(ConfigLoader, InvalidJsonReportsPosition) {
  Config cfg;
  auto st = ApplyJson("{\"cache\": {", "bad.json", cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("bad.json"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("parse error"));
}

TEST(ConfigLoader, ByteSizesAcceptUnits) {
  auto v = ParseText(FieldKind::kBytes, "512MiB");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::get<int64_t>(*v), 512ll << 20);
  EXPECT_EQ(std::get<int64_t>(*ParseText(FieldKind::kBytes, "2G")), 2ll << 30);
  EXPECT_EQ(std::get<int64_t>(*ParseText(FieldKind::kBytes, "4096")), 4096);
  EXPECT_FALSE(ParseText(FieldKind::kBytes, "12 parsecs").ok());
  EXPECT_FALSE(ParseText(FieldKind::kBytes, "99999999999T").ok());
}

// kv_dtype sets both sides; k_dtype / v_dtype override one side ("auto": follow kv_dtype).
TEST(ConfigLoader, SplitKvDtypes) {
  auto d = LoadConfig({});
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->cache.k_dtype.has_value());
  EXPECT_FALSE(d->cache.v_dtype.has_value());
  EXPECT_EQ(EffectiveKDtype(d->cache), KvDtype::kFp32);
  EXPECT_EQ(EffectiveVDtype(d->cache), KvDtype::kFp32);
  EXPECT_EQ(d->cache.kv_int4_group, 32);

  ConfigSources s;
  s.overrides = {{"cache.kv_dtype", "bf16"}, {"cache.v_dtype", "int4"}, {"cache.kv_int4_group", "64"}};
  auto c = LoadConfig(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(EffectiveKDtype(c->cache), KvDtype::kBf16);
  EXPECT_EQ(EffectiveVDtype(c->cache), KvDtype::kInt4);
  EXPECT_EQ(c->cache.kv_int4_group, 64);

  s.overrides = {{"cache.kv_dtype", "int8"}, {"cache.k_dtype", "fp16"}, {"cache.v_dtype", "auto"}};
  c = LoadConfig(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(EffectiveKDtype(c->cache), KvDtype::kFp16);
  EXPECT_EQ(EffectiveVDtype(c->cache), KvDtype::kInt8);

  Config cfg;
  auto st = ApplyText("cache.k_dtype", "int2", "command line", cfg);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("cache.k_dtype=int2: must be one of auto|fp32|fp16|bf16|fp8_e4m3|int8|int4"));
  st = ApplyText("cache.kv_int4_group", "48", "command line", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cache.kv_int4_group=48: must be a power of two"));
  st = ApplyJson(R"({"tenants": [{"name": "t", "allowed_kv_dtypes": ["fp32", "int4"]}]})", "f.json", cfg);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(cfg.tenants[0].allowed_kv_dtypes, (std::vector<KvDtype>{KvDtype::kFp32, KvDtype::kInt4}));
  st = ApplyJson(R"({"tenants": [{"name": "t", "allowed_kv_dtypes": ["fp4"]}]})", "f.json", cfg);
  EXPECT_THAT(std::string(st.message()), HasSubstr("allowed_kv_dtypes"));
}

TEST(ConfigLoader, TenantsParseAndValidate) {
  Config cfg;
  auto st = ApplyJson(R"({"tenants": [
      {"name": "gold", "api_keys": ["k1"], "weight": 3, "max_running": 8,
       "default_policy": "triattention", "allowed_policies": ["full", "triattention"]},
      {"name": "free", "api_keys": ["k2"], "weight": 1, "prefix_cache_group": "shared"}]})",
                      "f.json", cfg);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cfg.tenants.size(), 2u);
  EXPECT_EQ(cfg.tenants[0].weight, 3.0);
  EXPECT_EQ(cfg.tenants[0].default_policy, CompressionPolicyKind::kTriAttention);
  EXPECT_EQ(cfg.tenants[0].allowed_policies.size(), 2u);
  EXPECT_TRUE(Validate(cfg).ok());

  cfg.tenants[1].api_keys = {"k1"};
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("tenants[1].api_keys"));
  cfg.tenants[1].api_keys = {"k2"};
  cfg.tenants[1].name = "gold";
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("tenants[1].name=\"gold\": must be unique"));
  cfg.tenants[1].name = "free";
  cfg.tenants[0].allowed_policies = {CompressionPolicyKind::kFull};
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("tenants[0].default_policy=triattention"));
}

// Keys can come from a file (a mounted secret); errors name the file, never a key.
TEST(ConfigLoader, ApiKeysFromAFile) {
  const std::string dir = ::testing::TempDir();
  const std::string keys = dir + "/alpha.keys";
  { std::ofstream(keys) << "sk-file-1\n\n  sk-file-2  \n"; }
  const std::string cfg_path = dir + "/kvserve_keys.json";
  { std::ofstream(cfg_path) << R"({"tenants": [{"name": "a", "api_keys": ["sk-inline"], "api_keys_file": ")" << keys << R"("}]})"; }
  ConfigSources sources;
  sources.file_path = cfg_path;
  auto cfg = LoadConfig(sources);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->tenants[0].api_keys, (std::vector<std::string>{"sk-inline", "sk-file-1", "sk-file-2"}));
  EXPECT_EQ(DumpJson(*cfg).find("sk-file"), std::string::npos) << "keys are never dumped";

  { std::ofstream(cfg_path) << R"({"tenants": [{"name": "a", "api_keys_file": "/no/such/file"}]})"; }
  auto missing = LoadConfig(sources);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("tenants[0].api_keys_file=/no/such/file"));
  { std::ofstream(keys) << "\n   \n"; }
  { std::ofstream(cfg_path) << R"({"tenants": [{"name": "a", "api_keys_file": ")" << keys << R"("}]})"; }
  auto empty = LoadConfig(sources);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("holds no key"));
}

// Keys can come from an environment variable the config names (a Kubernetes secretKeyRef);
// errors name the variable, never a key; dumps redact them.
TEST(ConfigLoader, ApiKeysFromAnEnvironmentVariable) {
  const std::string dir = ::testing::TempDir();
  const std::string cfg_path = dir + "/kvserve_env_keys.json";
  { std::ofstream(cfg_path) << R"({"tenants": [{"name": "a", "api_keys": ["sk-inline"], "api_keys_env": "TENANT_A_KEYS"}]})"; }
  ConfigSources sources;
  sources.file_path = cfg_path;
  std::map<std::string, std::string> env = {{"TENANT_A_KEYS", " sk-env-1,sk-env-2\nsk-env-3 "}};
  sources.lookup_env = [&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto cfg = LoadConfig(sources);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->tenants[0].api_keys, (std::vector<std::string>{"sk-inline", "sk-env-1", "sk-env-2", "sk-env-3"}));
  EXPECT_EQ(DumpJson(*cfg).find("sk-env"), std::string::npos) << "keys are never dumped";
  EXPECT_NE(DumpJson(*cfg).find("TENANT_A_KEYS"), std::string::npos) << "the variable's name is not secret";

  env.erase("TENANT_A_KEYS");
  auto unset = LoadConfig(sources);
  ASSERT_FALSE(unset.ok());
  EXPECT_THAT(std::string(unset.status().message()),
              HasSubstr("tenants[0].api_keys_env=TENANT_A_KEYS: the environment variable is not set"));
  env["TENANT_A_KEYS"] = " , \n";
  auto empty = LoadConfig(sources);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("holds no key"));
  env["TENANT_A_KEYS"] = "sk-inline";
  auto twice = LoadConfig(sources);
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("listed twice"));
  EXPECT_EQ(std::string(twice.status().message()).find("sk-inline"), std::string::npos);

  // The real process environment, through the same lookup the daemon uses.
  char entry[] = "TENANT_A_KEYS=sk-proc";
  char other[] = "PATH=/bin";
  char* envp[] = {other, entry, nullptr};
  sources.lookup_env = EnvLookupFromEnviron(envp);
  auto proc = LoadConfig(sources);
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_EQ(proc->tenants[0].api_keys.back(), "sk-proc");
}

// The /metrics key is a secret field: redacted in dumps, settable from the environment.
TEST(ConfigLoader, MetricsApiKeyIsSecret) {
  ConfigSources sources;
  sources.env = {{"KVSERVE_SERVER_METRICS_API_KEY", "sk-scrape"}};
  auto cfg = LoadConfig(sources);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->server.metrics_api_key, "sk-scrape");
  EXPECT_EQ(DumpJson(*cfg).find("sk-scrape"), std::string::npos);
  EXPECT_NE(DumpJson(*cfg).find("\"metrics_api_key\": \"<redacted>\""), std::string::npos);
}

TEST(ConfigLoader, TenantWithoutDefaultPolicyInheritsTheServers) {
  Config cfg;
  auto st = ApplyJson(R"({"compression": {"default_policy": "snapkv"},
      "tenants": [{"name": "a", "api_keys": ["k1"]},
                  {"name": "b", "api_keys": ["k2"], "default_policy": "full"}]})",
                      "f.json", cfg);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(cfg.tenants[0].has_default_policy);
  EXPECT_EQ(EffectiveDefaultPolicy(cfg, &cfg.tenants[0]), CompressionPolicyKind::kSnapKv);
  EXPECT_EQ(EffectiveDefaultPolicy(cfg, &cfg.tenants[1]), CompressionPolicyKind::kFull);
  EXPECT_EQ(EffectiveDefaultPolicy(cfg, nullptr), CompressionPolicyKind::kSnapKv);
  // The inherited policy must be one the tenant may use.
  cfg.tenants[0].allowed_policies = {CompressionPolicyKind::kFull};
  EXPECT_THAT(std::string(Validate(cfg).message()),
              HasSubstr("tenants[0].default_policy=snapkv (inherited from compression.default_policy)"));
  // A dump does not turn the inherited policy into an explicit one.
  cfg.tenants[0].allowed_policies.clear();
  Config again;
  ASSERT_TRUE(ApplyJson(DumpJson(cfg), "dump", again).ok());
  EXPECT_FALSE(again.tenants[0].has_default_policy);
  EXPECT_TRUE(again.tenants[1].has_default_policy);
}

// Rate limits and compression defaults per tenant: parsed, inherited when unset, and checked
// against the server's settings with errors that name the tenant's field.
TEST(ConfigLoader, TenantRateLimitsAndCompressionDefaults) {
  Config cfg;
  auto st = ApplyJson(R"({"compression": {"budget": 512, "window": 32},
      "tenants": [{"name": "a", "api_keys": ["k1"], "requests_per_minute": 60, "tokens_per_minute": 40000,
                   "budget": 128, "window": 16, "k_dtype": "fp32"},
                  {"name": "b", "api_keys": ["k2"]}]})",
                      "f.json", cfg);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(Validate(cfg).ok()) << Validate(cfg);
  EXPECT_EQ(cfg.tenants[0].requests_per_minute, 60);
  EXPECT_EQ(cfg.tenants[0].tokens_per_minute, 40000);
  EXPECT_EQ(cfg.tenants[1].requests_per_minute, 0) << "unset: unlimited";
  EXPECT_EQ(EffectiveCompression(cfg, &cfg.tenants[0]).budget, 128);
  EXPECT_EQ(EffectiveCompression(cfg, &cfg.tenants[0]).window, 16);
  EXPECT_EQ(EffectiveCompression(cfg, &cfg.tenants[1]).budget, 512) << "inherited";
  EXPECT_EQ(EffectiveCompression(cfg, &cfg.tenants[1]).window, 32);
  EXPECT_EQ(EffectiveCompression(cfg, nullptr).budget, 512);
  EXPECT_FALSE(cfg.tenants[0].v_dtype.has_value()) << "auto: the pool's";

  Config bad = cfg;
  bad.tenants[0].budget = 4;
  EXPECT_THAT(std::string(Validate(bad).message()), HasSubstr("tenants[0].budget=4: must be 0"));
  bad = cfg;
  bad.tenants[1].window = 600;
  EXPECT_THAT(std::string(Validate(bad).message()),
              HasSubstr("tenants[1].budget=512 (inherited from compression.budget): must hold the tenant's window"));
  bad = cfg;
  bad.tenants[0].k_dtype = KvDtype::kInt8;
  EXPECT_THAT(std::string(Validate(bad).message()),
              HasSubstr("tenants[0].k_dtype=int8: this server's KV pool stores keys as fp32"));
  bad = cfg;
  bad.tenants[0].allowed_kv_dtypes = {KvDtype::kInt8};
  EXPECT_THAT(std::string(Validate(bad).message()), HasSubstr("tenants[0].k_dtype=fp32: must be one of"));
  Config negative;
  EXPECT_THAT(std::string(ApplyJson(R"({"tenants": [{"name": "a", "tokens_per_minute": -1}]})", "f.json", negative)
                              .message()),
              HasSubstr("tenants[0].tokens_per_minute=-1"));
  // A dump loads back to the same tenants.
  Config again;
  ASSERT_TRUE(ApplyJson(DumpJson(cfg), "dump", again).ok());
  EXPECT_EQ(again.tenants[0].tokens_per_minute, 40000);
  EXPECT_EQ(again.tenants[0].k_dtype, KvDtype::kFp32);
  EXPECT_FALSE(again.tenants[1].k_dtype.has_value());
}

// --remote-kv alone starts: the host prefix tier its blocks land in is sized like the KV pool,
// and the derivation is noted for the log. An explicit size is kept.
TEST(ConfigLoader, RemoteKvTierGetsAHostPrefixTierByDefault) {
  ConfigSources sources;
  sources.overrides = {{"cache.remote_kv_url", "redis://127.0.0.1:6379"}, {"cache.kv_bytes", "64MiB"}};
  auto cfg = LoadConfig(sources);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->cache.host_cache_bytes, 64ull << 20);
  ASSERT_EQ(cfg->derived.size(), 1u);
  EXPECT_THAT(cfg->derived[0], HasSubstr("cache.host_cache_bytes=67108864 (64 MiB, as cache.kv_bytes)"));

  sources.overrides.push_back({"cache.host_cache_bytes", "1GiB"});
  cfg = LoadConfig(sources);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->cache.host_cache_bytes, 1ull << 30);
  EXPECT_TRUE(cfg->derived.empty());

  cfg = LoadConfig(ConfigSources{});
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->cache.host_cache_bytes, 0u) << "no remote tier: the host prefix tier stays off";
}

TEST(ConfigLoader, CrossFieldWatermarks) {
  ConfigSources s;
  s.overrides = {{"compression.auto_low_watermark", "0.95"}};
  auto cfg = LoadConfig(s);
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("compression.auto_low_watermark=0.95"));
}

TEST(ConfigLoader, SpeculativeSettings) {
  ConfigSources s;
  s.overrides = {{"speculative.method", "ngram"},
                 {"speculative.num_tokens", "6"},
                 {"speculative.ngram_min", "1"}};
  auto cfg = LoadConfig(s);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->speculative.method, SpeculativeMethod::kNgram);
  EXPECT_EQ(cfg->speculative.num_tokens, 6);
  EXPECT_EQ(cfg->speculative.ngram_min, 1);
  s.overrides = {{"speculative.ngram_min", "5"}};  // above the default ngram_max of 4
  cfg = LoadConfig(s);
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("speculative.ngram_min=5"));
  s.overrides = {{"speculative.method", "eagle"}};
  EXPECT_FALSE(LoadConfig(s).ok());
  s.overrides = {{"speculative.num_tokens", "0"}};
  EXPECT_FALSE(LoadConfig(s).ok());
  // method draft needs a draft model directory.
  s.overrides = {{"speculative.method", "draft"}};
  cfg = LoadConfig(s);
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("speculative.draft_model"));
  s.overrides = {{"speculative.method", "draft"},
                 {"speculative.draft_model", "/models/draft"},
                 {"speculative.draft_kv_bytes", "8388608"}};
  cfg = LoadConfig(s);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->speculative.method, SpeculativeMethod::kDraft);
  EXPECT_EQ(cfg->speculative.draft_model, "/models/draft");
  EXPECT_EQ(cfg->speculative.draft_kv_bytes, 8ull << 20);
}

TEST(ConfigLoader, DemotionTiersAreBelowThePoolAndPartOfItsBytes) {
  auto load = [](std::vector<std::pair<std::string, std::string>> o) {
    ConfigSources s;
    s.overrides = std::move(o);
    return LoadConfig(s);
  };
  auto ok = load({{"cache.demote_kv_bytes", "1048576"}, {"cache.demote_dtypes", "int8,int4"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->cache.demote_dtypes, (std::vector<KvDtype>{KvDtype::kInt8, KvDtype::kInt4}));
  // Off by default: no tier is checked.
  EXPECT_TRUE(load({{"cache.demote_dtypes", "fp32"}}).ok());
  const std::pair<std::vector<std::pair<std::string, std::string>>, std::string> bad[] = {
      {{{"cache.demote_kv_bytes", "1073741824"}, {"cache.kv_bytes", "1048576"}}, "must be below cache.kv_bytes"},
      {{{"cache.demote_kv_bytes", "1048576"}, {"cache.demote_dtypes", "int4,int8"}}, "int8 must have fewer bits"},
      {{{"cache.demote_kv_bytes", "1048576"}, {"cache.kv_dtype", "int8"}, {"cache.demote_dtypes", "int8"}},
       "int8 must have fewer bits than the pool's K and V (8)"},
  };
  for (const auto& [overrides, what] : bad) {
    auto cfg = load(overrides);
    ASSERT_FALSE(cfg.ok()) << what;
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr(what));
  }
}

// The low-rank key tier is one more demotion tier: it needs demotion bytes, may stand alone
// (no dtype tiers) and counts toward the 7 tiers.
TEST(ConfigLoader, LowRankKeyTierIsADemotionTier) {
  auto load = [](std::vector<std::pair<std::string, std::string>> o) {
    ConfigSources s;
    s.overrides = std::move(o);
    return LoadConfig(s);
  };
  auto ok = load({{"cache.demote_kv_bytes", "1048576"}, {"cache.lowrank_key_rank", "16"},
                  {"cache.lowrank_k_dtype", "int8"}, {"cache.lowrank_v_dtype", "int4"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->cache.lowrank_key_rank, 16);
  EXPECT_EQ(ok->cache.lowrank_k_dtype, KvDtype::kInt8);
  EXPECT_EQ(ok->cache.lowrank_v_dtype, KvDtype::kInt4);
  auto off = load({{"cache.lowrank_key_rank", "16"}});
  ASSERT_FALSE(off.ok());
  EXPECT_THAT(std::string(off.status().message()), HasSubstr("cache.lowrank_key_rank=16"));
  EXPECT_THAT(std::string(off.status().message()), HasSubstr("cache.demote_kv_bytes > 0"));
  auto bad = load({{"cache.lowrank_key_rank", "-2"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cache.lowrank_key_rank"));
}

TEST(ConfigLoader, DumpRoundTripsAndRedactsKeys) {
  Config cfg;
  cfg.cache.block_size = 64;
  TenantConfig t;
  t.name = "t";
  t.api_keys = {"secret-key"};
  cfg.tenants.push_back(t);
  std::string dumped = DumpJson(cfg);
  EXPECT_THAT(dumped, ::testing::Not(HasSubstr("secret-key")));
  EXPECT_THAT(dumped, HasSubstr("<redacted>"));
  // Every field of the dump loads back (apart from redacted keys) to the same value.
  auto j = nlohmann::json::parse(dumped);
  j.erase("tenants");
  Config back;
  ASSERT_TRUE(ApplyJson(j.dump(), "dump", back).ok());
  EXPECT_EQ(back.cache.block_size, 64);
  for (const auto& f : ConfigFields()) {
    EXPECT_EQ(FormatValue(f.get(back)), FormatValue(f.get(cfg))) << f.path;
  }
}

TEST(ConfigLoader, EnvFromEnvironPicksOnlyOurVariables) {
  std::string a = "KVSERVE_CACHE_BLOCK_SIZE=32", b = "PATH=/bin", c = "KVSERVE_X";
  char* envp[] = {a.data(), b.data(), c.data(), nullptr};
  auto kv = EnvFromEnviron(envp);
  ASSERT_EQ(kv.size(), 1u);
  EXPECT_EQ(kv[0].first, "KVSERVE_CACHE_BLOCK_SIZE");
  EXPECT_EQ(kv[0].second, "32");
}

TEST(ConfigFields, EveryFieldHasHelpAndEnvName) {
  for (const auto& f : ConfigFields()) {
    EXPECT_FALSE(f.help.empty()) << f.path;
    EXPECT_NE(f.path.find('.'), std::string::npos) << f.path;
    EXPECT_TRUE(EnvNameFor(f.path).starts_with("KVSERVE_"));
  }
  EXPECT_EQ(EnvNameFor("cache.block_size"), "KVSERVE_CACHE_BLOCK_SIZE");
}

}  // namespace
}  // namespace kvserve::config

namespace kvserve::config {
namespace {

TEST(ConfigLoader, LoraSectionParsesBothAdapterFormsAndValidatesByField) {
  Config cfg;
  ASSERT_TRUE(
      ApplyJson(R"({"lora": {"max_loras": 2, "adapters": {"sql": "/a/sql", "chat": "/a/chat"}},
                            "tenants": [{"name": "t", "adapters": ["sql"]}]})",
                "f.json", cfg)
          .ok());
  EXPECT_EQ(cfg.lora.max_loras, 2);
  EXPECT_THAT(cfg.lora.adapters, ::testing::UnorderedElementsAre("sql=/a/sql", "chat=/a/chat"));
  EXPECT_TRUE(cfg.lora.active());
  EXPECT_THAT(cfg.tenants[0].adapters, ::testing::ElementsAre("sql"));
  EXPECT_TRUE(Validate(cfg).ok());

  Config list;
  ASSERT_TRUE(ApplyJson(R"({"lora": {"adapters": ["a=/x"]}})", "f.json", list).ok());
  EXPECT_THAT(list.lora.adapters, ::testing::ElementsAre("a=/x"));
  EXPECT_THAT(
      std::string(ApplyJson(R"({"lora": {"adapters": {"a": 3}}})", "f.json", list).message()),
      HasSubstr("lora.adapters.a: must be a directory path"));
  EXPECT_THAT(std::string(ApplyJson(R"({"lora": {"max_loras": 0}})", "f.json", list).message()),
              HasSubstr("lora.max_loras"));

  cfg.lora.adapters = {"sql=/a", "noequals"};
  EXPECT_THAT(std::string(Validate(cfg).message()),
              HasSubstr("lora.adapters[1]=\"noequals\": must be name=path"));
  cfg.lora.adapters = {"sql=/a", "sql=/b"};
  EXPECT_THAT(std::string(Validate(cfg).message()),
              HasSubstr("lora.adapters[1]: the name 'sql' is listed twice"));
  cfg.model.served_name = "base";
  cfg.lora.adapters = {"base=/a"};
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("model.served_name"));
  cfg.lora.adapters = {"sql=/a"};
  cfg.lora.max_cpu_loras = 1;
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("lora.max_cpu_loras=1"));
  cfg.lora.max_cpu_loras = 0;
  cfg.engine.backend = Backend::kCuda;
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("CUDA"));
  cfg.engine.backend = Backend::kAuto;
  cfg.parallel.pipeline = 2;
  EXPECT_THAT(std::string(Validate(cfg).message()), HasSubstr("parallel.pipeline=2"));
}

TEST(ConfigLoader, LoraFlagAppendsAdapters) {
  ConfigSources s;
  s.overrides = {{"lora.adapters+", "a=/x"}, {"lora.adapters+", "b=/y,z"}};
  auto cfg = LoadConfig(s);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(cfg->lora.adapters, ::testing::ElementsAre("a=/x", "b=/y,z"));
}

}  // namespace
}  // namespace kvserve::config
