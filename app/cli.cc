#include "app/cli.h"

#include <algorithm>
#include <functional>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "app/build_info.h"
#include "app/calibrate_command.h"
#include "app/eval_command.h"
#include "app/export_gguf_command.h"
#include "app/generate_command.h"
#include "app/serve_command.h"
#include "config/fields.h"

namespace kvserve::app {
namespace {

// Short flag -> config field path. Every field is also reachable as --<path>.
struct FlagAlias {
  const char* flag;
  const char* path;
  const char* help;
};
constexpr FlagAlias kAliases[] = {
    {"--model", "model.path", "model directory (Hugging Face layout); default: the bundled model"},
    {"--served-model-name", "model.served_name", "name clients put in `model`"},
    {"--host", "server.host", "listen address (default 127.0.0.1)"},
    {"--http-port", "server.http_port", "OpenAI HTTP port; 0 picks a free one (default 8000)"},
    {"--grpc-port", "server.grpc_port", "gRPC port; 0 picks a free one (default 50051)"},
    {"--log-level", "logging.level", "trace|debug|info|warn|error|off"},
    {"--log-format", "logging.format", "text|json"},
    {"--threads", "engine.threads", "CPU compute threads; 0: all cores"},
    {"--backend", "engine.backend", "auto|cpu|cuda"},
    {"--block-size", "cache.block_size", "tokens per KV block (power of two, 8..128)"},
    {"--kv-bytes", "cache.kv_bytes", "KV pool size on CPU, e.g. 512MiB"},
    {"--kv-dtype", "cache.kv_dtype", "fp32|fp16|bf16|fp8_e4m3|int8|int4 (K and V)"},
    {"--k-dtype", "cache.k_dtype", "auto|fp32|fp16|bf16|fp8_e4m3|int8|int4 (K only)"},
    {"--v-dtype", "cache.v_dtype", "auto|fp32|fp16|bf16|fp8_e4m3|int8|int4 (V only)"},
    {"--max-num-seqs", "scheduler.max_num_seqs", "sequences running at once"},
    {"--max-num-batched-tokens", "scheduler.max_num_batched_tokens", "token budget per step"},
    {"--metrics-compat", "server.metrics_compat", "none|vllm"},
    {"--speculative-method", "speculative.method", "none|ngram: speculative decoding default"},
    {"--num-speculative-tokens", "speculative.num_tokens", "draft tokens per step (1..16)"},
    {"--lora", "lora.adapters+", "serve a LoRA adapter: name=path (PEFT directory); repeatable"},
    {"--remote-kv", "cache.remote_kv_url",
     "remote KV tier shared by replicas: redis://HOST:PORT[/DB]"},
};

struct Command {
  std::string name;
  std::string summary;
  std::string usage;
  std::vector<std::string> switches;  // accepted command-specific switches; "--x=" takes a value
  std::function<int(const ParsedArgs&, char** envp, std::ostream& out, std::ostream& err)> run;
};

int RunVersion(const ParsedArgs&, char**, std::ostream& out, std::ostream&) {
  out << "kvserve " << kBuildVersion << " (git " << kBuildGitRevision << ", " << kBuildType
      << ", cuda " << (kBuildWithCuda ? "on" : "off") << ")\n";
  return kExitOk;
}

bool Has(const ParsedArgs& args, std::string_view sw) {
  return std::find(args.switches.begin(), args.switches.end(), sw) != args.switches.end();
}

// Markdown table of every field: the source of docs/configuration.md.
template <typename Root>
void PrintFieldTable(const std::vector<config::Field<Root>>& fields, const Root& defaults,
                     bool with_env, std::ostream& out) {
  out << (with_env
              ? "| field | environment | default | allowed | meaning |\n|---|---|---|---|---|\n"
              : "| field | default | allowed | meaning |\n|---|---|---|---|\n");
  for (const auto& f : fields) {
    std::string def = config::FormatValue(f.get(defaults));
    if (def.empty()) def = "(empty)";
    out << "| `" << f.path << "` | ";
    if (with_env) out << "`" << config::EnvNameFor(f.path) << "` | ";
    out << "`" << def << "` | " << absl::StrReplaceAll(f.allowed, {{"|", "\\|"}}) << " | " << f.help
        << " |\n";
  }
}

int RunConfig(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err) {
  if (Has(args, "--fields")) {
    PrintFieldTable(config::ConfigFields(), config::Config{}, true, out);
    out << "\nTenant entries (`tenants: [ {...} ]`, JSON file only):\n\n";
    PrintFieldTable(config::TenantFields(), config::TenantConfig{}, false, out);
    return kExitOk;
  }
  if (!Has(args, "--dump")) {
    err << "kvserve config: nothing to do; use `kvserve config --dump [--config FILE]` or "
           "`kvserve config --fields`\n";
    return kExitUsage;
  }
  auto cfg = LoadConfigFromArgs(args, envp);
  if (!cfg.ok()) {
    err << "kvserve: invalid configuration: " << cfg.status().message() << "\n";
    return kExitUsage;
  }
  out << config::DumpJson(*cfg) << "\n";
  return kExitOk;
}

std::vector<Command> Commands() {
  return {
      {"calibrate",
       "measure TriAttention query statistics and the low-rank key basis of a model on plain text",
       "kvserve calibrate --model DIR --text FILE --out FILE [--max-tokens N] [--window N] "
       "[--key-basis-out FILE]",
       {std::begin(kCalibrateSwitches), std::end(kCalibrateSwitches)},
       RunCalibrate},
      {"config",
       "print the effective configuration, or the table of all fields",
       "kvserve config --dump [--config FILE] [config flags] | kvserve config --fields",
       {"--dump", "--fields"},
       RunConfig},
      {"eval",
       "perplexity and passkey accuracy of every KV compression policy and budget",
       "kvserve eval --text FILE [--model DIR] [--passkey N] [--filler N] [--budgets 64,128,...] "
       "[--policies triattention,...] [--divide-length N] [--chunk N] [--ppl-tokens N] "
       "[--ppl-window N] "
       "[--seed S] [--out-tsv FILE]",
       {std::begin(kEvalSwitches), std::end(kEvalSwitches)},
       RunEval},
      {"export-gguf",
       "write a Hugging Face model directory as a GGUF file (llama.cpp's format), quantized",
       "kvserve export-gguf --model DIR --out FILE.gguf [--type Q4_K_M|Q5_K_M|Q6_K|Q8_0|F16|<block "
       "type>] "
       "[--split-bytes N]",
       {std::begin(kExportGgufSwitches), std::end(kExportGgufSwitches)},
       RunExportGguf},
      {"generate",
       "complete one prompt on the CPU and print the text (smoke test)",
       "kvserve generate --prompt TEXT [--max-tokens N] [--temperature T] [--seed S] [--model DIR]",
       {std::begin(kGenerateSwitches), std::end(kGenerateSwitches)},
       RunGenerate},
      {"serve",
       "serve the model over the OpenAI-compatible HTTP API and gRPC until SIGTERM",
       "kvserve serve [--config FILE] [--model DIR] [--host H] [--http-port P] [--grpc-port P]",
       {},
       RunServe},
      {"version", "print version and build information", "kvserve version", {}, RunVersion},
  };
}

void PrintHelp(std::ostream& out) {
  out << "kvserve: paged-attention LLM serving daemon with per-request KV compression\n\n"
         "Usage: kvserve <command> [flags]\n\nCommands:\n";
  for (const auto& c : Commands()) {
    out << "  " << c.name << std::string(10 - std::min<size_t>(c.name.size(), 9), ' ') << c.summary
        << "\n      " << c.usage << "\n";
  }
  out << "  help      print this help\n\n"
         "Config flags (precedence: flags > KVSERVE_* environment > --config file > defaults):\n"
         "  --config FILE                JSON config file (also KVSERVE_CONFIG)\n";
  for (const auto& a : kAliases) {
    std::string f = absl::StrCat(a.flag, " V");
    out << "  " << f << std::string(f.size() < 29 ? 29 - f.size() : 1, ' ') << a.help << " ("
        << a.path << ")\n";
  }
  out << "  --<field> V, --set field=V   any config field by path, e.g. --cache.block_size=32\n"
         "\nEvery field can also be set as KVSERVE_<SECTION>_<FIELD>, e.g. "
         "KVSERVE_CACHE_BLOCK_SIZE=32.\n"
         "`kvserve config --dump` shows all fields; docs/configuration.md explains them.\n"
         "\nExit status: 0 success, 1 runtime failure, 2 bad usage or invalid configuration.\n";
}

const config::Field<config::Config>* FieldByPath(const std::string& path) {
  for (const auto& f : config::ConfigFields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<config::Config> LoadConfigFromArgs(const ParsedArgs& args, char** envp) {
  config::ConfigSources sources;
  sources.file_path = args.config_file;
  sources.env = config::EnvFromEnviron(envp);
  sources.lookup_env = config::EnvLookupFromEnviron(envp);
  sources.overrides = args.overrides;
  return config::LoadConfig(sources);
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args) {
  ParsedArgs parsed;
  std::vector<std::string> known_flags = {"--config", "--set", "--help"};
  for (const auto& a : kAliases) known_flags.emplace_back(a.flag);
  for (const auto& f : config::ConfigFields()) known_flags.push_back("--" + f.path);
  for (const auto& c : Commands()) {
    for (const auto& s : c.switches)
      known_flags.push_back(s.ends_with("=") ? s.substr(0, s.size() - 1) : s);
  }

  size_t i = 0;
  if (i < args.size() && !args[i].starts_with("-")) parsed.command = args[i++];
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      parsed.command = "help";
      continue;
    }
    if (!arg.starts_with("--")) {
      parsed.positional.push_back(arg);
      continue;
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (value) return *value;
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat(name, ": needs a value"));
      return args[++i];
    };
    if (name == "--config") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      parsed.config_file = *v;
      continue;
    }
    if (name == "--set") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      size_t eq = v->find('=');
      if (eq == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("--set ", *v, ": expected field=value"));
      }
      parsed.overrides.emplace_back(v->substr(0, eq), v->substr(eq + 1));
      continue;
    }
    const char* path = nullptr;
    for (const auto& a : kAliases) {
      if (name == a.flag) path = a.path;
    }
    if (path == nullptr && FieldByPath(name.substr(2)) != nullptr) path = name.c_str() + 2;
    if (path != nullptr) {
      auto v = take_value();
      if (!v.ok()) return v.status();
      parsed.overrides.emplace_back(path, *v);
      continue;
    }
    bool is_switch = false;
    bool is_valued_switch = false;
    for (const auto& c : Commands()) {
      if (c.name != parsed.command) continue;
      is_switch |= std::find(c.switches.begin(), c.switches.end(), name) != c.switches.end();
      is_valued_switch |=
          std::find(c.switches.begin(), c.switches.end(), name + "=") != c.switches.end();
    }
    if (is_switch && !value) {
      parsed.switches.push_back(name);
      continue;
    }
    if (is_valued_switch) {
      auto v = take_value();
      if (!v.ok()) return v.status();
      parsed.switch_values.emplace_back(name, *v);
      continue;
    }
    std::string msg = absl::StrCat("unknown flag ", name);
    if (auto hint = config::DidYouMean(name, known_flags))
      absl::StrAppend(&msg, " (did you mean ", *hint, "?)");
    return absl::InvalidArgumentError(msg);
  }
  return parsed;
}

int RunCli(int argc, char** argv, char** envp, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintHelp(err);
    return kExitUsage;
  }
  auto parsed = ParseArgs(args);
  if (!parsed.ok()) {
    err << "kvserve: " << parsed.status().message() << "\n(see `kvserve --help`)\n";
    return kExitUsage;
  }
  parsed->program = argv[0];
  if (parsed->command == "help") {
    PrintHelp(out);
    return kExitOk;
  }
  auto commands = Commands();
  for (const auto& c : commands) {
    if (c.name == parsed->command) return c.run(*parsed, envp, out, err);
  }
  std::vector<std::string> names;
  for (const auto& c : commands) names.push_back(c.name);
  std::string msg = absl::StrCat("kvserve: unknown command '", parsed->command, "'");
  if (auto hint = config::DidYouMean(parsed->command, names))
    absl::StrAppend(&msg, " (did you mean '", *hint, "'?)");
  err << msg << "\n(see `kvserve --help`)\n";
  return kExitUsage;
}

}  // namespace kvserve::app
