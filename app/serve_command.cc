#include "app/serve_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <ostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "app/build_info.h"
#include "app/model_dir.h"
#include "app/pipeline_ranks.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/logger.h"
#include "chat/chat_formats.h"
#include "config/config_loader.h"
#include "engine/cuda_backend_loader.h"
#include "server/core/tokenizer_text_codec.h"
#include "server/core/wall_clock.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/server_app.h"
#include "server/signals.h"

namespace kvserve::app {
namespace {

base::LogLevel ToBase(config::LogLevel level) {
  switch (level) {
    case config::LogLevel::kTrace: return base::LogLevel::kTrace;
    case config::LogLevel::kDebug: return base::LogLevel::kDebug;
    case config::LogLevel::kInfo: return base::LogLevel::kInfo;
    case config::LogLevel::kWarn: return base::LogLevel::kWarn;
    case config::LogLevel::kError: return base::LogLevel::kError;
    case config::LogLevel::kOff: return base::LogLevel::kOff;
  }
  return base::LogLevel::kInfo;
}

std::string ServedModelName(const config::Config& cfg, const std::string& model_dir) {
  if (!cfg.model.served_name.empty()) return cfg.model.served_name;
  std::filesystem::path p(model_dir);
  if (!p.has_filename()) p = p.parent_path();  // "models/kvs-tiny/"
  // A GGUF file serves under its stem: "qwen3-8b-q4_k_m" for qwen3-8b-q4_k_m.gguf.
  return (p.extension() == ".gguf" ? p.stem() : p.filename()).string();
}

}  // namespace

ServeFactories DefaultServeFactories() {
  ServeFactories f;
  f.model_dir = [](const config::Config& cfg, const ParsedArgs& args) {
    return ResolveModelDir(cfg.model.path, ExecutablePath(args.program));
  };
  f.codec = [](const config::Config& cfg, const std::string& model_dir)
      -> absl::StatusOr<std::unique_ptr<server::TextCodec>> {
    KVS_ASSIGN_OR_RETURN(auto codec, server::TokenizerTextCodec::Load(model_dir, cfg.model.chat_template));
    return std::unique_ptr<server::TextCodec>(std::move(codec));
  };
  f.engine = [](const config::Config& cfg, const std::string& model_dir, engine::EngineDeps deps) {
#if defined(KVSERVE_HAVE_CUDA)
    // The CUDA backend lives in libkvserve_cuda_backend.so beside this binary; CreateEngine
    // loads it only when engine.backend resolves to cuda (a CPU-only run never maps cuBLAS).
    deps.load_cuda_backend = [logger = deps.logger]() -> absl::StatusOr<engine::CudaBackendFactory> {
      KVS_ASSIGN_OR_RETURN(engine::LoadedCudaModule m,
                           engine::LoadCudaBackendModule(engine::CudaModuleSearchPaths(ExecutablePath(""))));
      logger.info("cuda backend module: %s", m.path);
      return std::move(m.factory);
    };
#endif
    return engine::CreateEngine(cfg, model_dir, std::move(deps));
  };
  return f;
}

namespace {

// SIGHUP: re-reads the configuration (file, key files, the environment captured at start)
// and replaces the tenants' API keys: rotating a mounted Kubernetes secret needs no restart.
// Only keys are applied; any other change is reported as needing a restart. A configuration
// that no longer loads, or that changes the tenants, keeps the old keys. Never logs a key.
void ReloadApiKeys(const config::ConfigSources& sources, const config::Config& running, server::ServerApp& app,
                   const base::Logger& logger) {
  absl::StatusOr<config::Config> fresh = config::LoadConfig(sources);
  if (!fresh.ok()) {
    logger.error("SIGHUP: the configuration no longer loads, API keys unchanged: %s",
                 std::string(fresh.status().message()));
    return;
  }
  if (absl::Status st = app.ReloadKeys(fresh->tenants); !st.ok()) {
    logger.error("SIGHUP: API keys unchanged: %s", std::string(st.message()));
    return;
  }
  size_t keys = 0;
  for (const auto& t : fresh->tenants) keys += t.api_keys.size();
  logger.info("SIGHUP: API keys reloaded (%d keys for %d tenants)", static_cast<int>(keys),
              static_cast<int>(fresh->tenants.size()));
  // Compared without the keys (their number shows in a dump even though they are redacted).
  auto without_keys = [](config::Config c) {
    for (auto& t : c.tenants) t.api_keys.clear();
    return config::DumpJson(c);
  };
  if (without_keys(*fresh) != without_keys(running)) {
    logger.warn("SIGHUP: the configuration has other changes; only API keys are reloaded, the rest needs a restart");
  }
}

// VmHWM of this process (kB), -1 if /proc is not there: what start-up cost in memory.
long PeakResidentKb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

}  // namespace

int RunServe(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err) {
  return RunServeWith(args, envp, out, err, DefaultServeFactories());
}

int RunServeWith(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err,
                 const ServeFactories& factories) {
  // Before any thread exists: every thread inherits the mask, main takes the signals.
  const server::TerminationSignals signals = server::TerminationSignals::Block();
  auto clock = std::make_shared<base::SteadyClock>();
  const base::Nanos started = clock->now_ns();

  config::ConfigSources sources;
  sources.file_path = args.config_file;
  sources.env = config::EnvFromEnviron(envp);
  sources.lookup_env = config::EnvLookupFromEnviron(envp);
  sources.overrides = args.overrides;
  absl::StatusOr<config::Config> cfg = config::LoadConfig(sources);
  if (!cfg.ok()) {
    err << "kvserve: invalid configuration: " << cfg.status().message() << "\n";
    return kExitUsage;
  }
  auto sinks = base::LogSinks::Stderr(ToBase(cfg->logging.level),
                                      cfg->logging.format == config::LogFormat::kJson
                                          ? base::LogFormat::kJson
                                          : base::LogFormat::kText);
  base::Logger logger(sinks, "serve");
  for (const auto& line : cfg->derived) logger.info("configuration: %s", line);
  for (const auto& name : cfg->ignored_env) {
    logger.debug("ignoring environment variable %s: not a config field (e.g. a Kubernetes service link)", name);
  }

  absl::StatusOr<std::string> model_dir = factories.model_dir(*cfg, args);
  if (!model_dir.ok()) {
    err << "kvserve: " << model_dir.status().message() << "\n";
    return kExitFailure;
  }
  // A model split over ranks (mpirun; pipeline_ranks.h). World size 1: no ranks, today's path.
  std::atomic<bool> rank_failed{false};
  std::unique_ptr<PipelineRanks> ranks;
  if (cfg->parallel.world() > 1) {
    absl::StatusOr<std::unique_ptr<PipelineRanks>> started_ranks =
        PipelineRanks::Start(*cfg, *model_dir, logger, [&rank_failed, logger](const absl::Status& st) {
          // A stage died or hangs: requests fail, then this rank drains and exits non-zero so
          // that the orchestrator restarts the whole group.
          logger.error("%s: stopping", std::string(st.message()));
          rank_failed = true;
          kill(getpid(), SIGTERM);
        });
    if (!started_ranks.ok()) {
      err << "kvserve: " << started_ranks.status().message() << "\n";
      return kExitFailure;
    }
    ranks = *std::move(started_ranks);
    if (!ranks->leader()) return ranks->RunWorker(*model_dir);
    *cfg = ranks->stage_config();
  }
  absl::StatusOr<std::unique_ptr<server::TextCodec>> codec = factories.codec(*cfg, *model_dir);
  if (!codec.ok()) {
    err << "kvserve: cannot load the tokenizer of " << *model_dir << ": " << codec.status().message() << "\n";
    return kExitFailure;
  }
  absl::StatusOr<chat::ChatFormats> chat_formats = chat::ResolveChatFormats(
      cfg->model.reasoning_parser, {cfg->model.reasoning_start, cfg->model.reasoning_end},
      cfg->model.tool_call_parser, (*codec)->chat_template_source());
  if (!chat_formats.ok()) {
    err << "kvserve: invalid configuration: " << chat_formats.status().message() << "\n";
    return kExitUsage;
  }
  logger.info("chat output: reasoning %s, tool calls %s", chat_formats->reasoning ? "split" : "not split",
              std::string(chat::Name(chat_formats->tools)));
  // The metrics observe the engine, so they are built first and outlive it.
  server::PrometheusMetricsOptions metrics_options;
  metrics_options.model_name = ServedModelName(*cfg, *model_dir);
  for (const auto& t : cfg->tenants) metrics_options.tenants.push_back(t.name);
  metrics_options.vllm_compat = cfg->server.metrics_compat == config::MetricsCompat::kVllm;
  server::PrometheusMetrics metrics(std::move(metrics_options));

  engine::EngineDeps deps;
  deps.logger = logger.child("engine");
  deps.clock = clock;
  deps.observer = &metrics;
  if (ranks != nullptr) ranks->ConfigureEngine(deps);
  absl::StatusOr<std::unique_ptr<engine::ServingEngine>> engine = factories.engine(*cfg, *model_dir, deps);
  if (!engine.ok()) {
    if (ranks != nullptr) ranks->Shutdown();  // the workers leave their loops too
    err << "kvserve: cannot start the engine: " << engine.status().message() << "\n";
    return kExitFailure;
  }

  server::WallClock wall_clock;
  server::ServerAppOptions options;
  options.server = cfg->server;
  options.tenants = cfg->tenants;
  options.lora = cfg->lora;
  options.model_name = ServedModelName(*cfg, *model_dir);
  options.chat_formats = *chat_formats;
  options.version = kBuildVersion;
  options.id_seed = std::random_device{}();
  options.metrics_text = [&metrics] { return metrics.ExpositionText(); };
  options.on_http_response = [&metrics](std::string_view route, int status) {
    metrics.OnHttpResponse(route, status);
  };
  options.on_grpc_status = [&metrics](std::string_view method, int code) { metrics.OnGrpcStatus(method, code); };
  options.on_rate_limit = [&metrics](std::string_view tenant, const server::RateLimitState& state,
                                     std::string_view refused_by) { metrics.OnRateLimit(tenant, state, refused_by); };
  server::ServerAppDeps app_deps;
  app_deps.engine = engine->get();
  app_deps.codec = codec->get();
  app_deps.clock = clock.get();
  app_deps.wall_clock = &wall_clock;
  app_deps.logger = logger;
  {
    server::ServerApp app(std::move(options), std::move(app_deps));
    if (absl::Status st = app.Start(); !st.ok()) {
      err << "kvserve: " << st.message() << "\n";
      return kExitFailure;
    }
    logger.info("started in %.2f s (configuration to listening), peak RSS %.1f MiB",
                static_cast<double>(clock->now_ns() - started) * 1e-9,
                static_cast<double>(PeakResidentKb()) / 1024);
    out << app.ListeningLine() << std::endl;  // flushed: scripts wait for this line

    int sig = 0;
    while ((sig = signals.Wait()) == SIGHUP) ReloadApiKeys(sources, *cfg, app, logger);
    logger.info("received %s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    // mpirun sends SIGTERM when a rank died: a step waiting on it fails its requests now.
    if (ranks != nullptr) ranks->RequestStop();
    // A second SIGINT/SIGTERM cuts the drain short (requests still running are aborted).
    app.Drain([&](std::chrono::milliseconds d) { return signals.WaitForTermination(d).has_value(); });
  }
  engine->reset();  // after the servers: no stream is read any more
  if (ranks != nullptr) ranks->Shutdown();
  if (rank_failed) {
    // A stage died or hangs: MPI cannot be torn down with a dead peer (finalizing waits for
    // it), so the rank leaves at once; mpirun then ends the job with a non-zero status.
    logger.error("stopped: a pipeline stage failed");
    out.flush();
    err.flush();
    std::_Exit(kExitFailure);
  }
  logger.info("stopped");
  return kExitOk;
}

}  // namespace kvserve::app
