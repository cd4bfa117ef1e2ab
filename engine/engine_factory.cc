#include "engine/engine_factory.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/policy_factory.h"
#include "compression/triattention_stats.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"

namespace kvserve::engine {
namespace {

// Owns the model, the KV cache and the runner, and forwards the client API to the Engine.
// Members are declared in dependency order so destruction stops the loop first.
class LocalEngine final : public ServingEngine {
 public:
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<compression::TriAttentionStats> stats;  // null: triattention unavailable
  compression::PolicyContext compression;
  base::SteadyClock clock;                                 // compression phase timings
  Backend backend;
  std::unique_ptr<Engine> engine;

  ~LocalEngine() override {
    if (engine) engine->Stop();
  }
  absl::StatusOr<std::shared_ptr<TokenStream>> Submit(RequestSpec spec) override {
    return engine->Submit(std::move(spec));
  }
  void Abort(const std::string& id) override { engine->Abort(id); }
  void FinishAsStopped(const std::string& id) override { engine->FinishAsStopped(id); }
  EngineStats Stats() const override { return engine->Stats(); }
  void StartDrain() override { engine->StartDrain(); }
  int InFlight() const override { return engine->InFlight(); }
  void AbortAll() override { engine->AbortAll(); }
  int64_t max_model_len() const override { return engine->max_model_len(); }
};

// TriAttention statistics: an explicit compression.stats_path must load and match the model;
// the default <model>/triattention_stats.bin is optional (triattention is then refused per
// request with a clear error) but must match when present.
absl::StatusOr<std::unique_ptr<compression::TriAttentionStats>> LoadStatsFor(const config::Config& config,
                                                                           const std::string& model_dir,
                                                                           const model::LlamaModel& model,
                                                                           const base::Logger& logger) {
  const bool explicit_path = !config.compression.stats_path.empty();
  const std::string path = compression::StatsPathFor(config.compression.stats_path, model_dir);
  if (!explicit_path && !std::filesystem::exists(path)) {
    logger.warn("no TriAttention statistics at %s: policies triattention and auto are unavailable "
                "(run `kvserve calibrate`)", path);
    return std::unique_ptr<compression::TriAttentionStats>();
  }
  auto stats = compression::LoadStatsForModel(path, model.config(), model.rope_inv_freq());
  if (!stats.ok()) {
    return absl::Status(stats.status().code(), absl::StrCat("compression.stats_path: ", stats.status().message()));
  }
  logger.info("TriAttention statistics loaded from %s", path);
  return std::make_unique<compression::TriAttentionStats>(std::move(*stats));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingEngine>> CreateEngine(const config::Config& config,
                                                            const std::string& model_dir,
                                                            EngineDeps deps) {
  // One line that says which backend runs and why.
  std::string why;
  BackendSupport support = ThisBuildSupports();
  support.cuda_runner_available = static_cast<bool>(deps.make_cuda_backend);
  KVS_ASSIGN_OR_RETURN(config::Backend kind, ResolveBackend(config.engine.backend, kernels::ProbeCudaDevice(),
                                                            support, why));
  deps.logger.info("%s", why);
  auto local = std::make_unique<LocalEngine>();
  model::ModelOptions mo;
  mo.threads = config.engine.threads;
  mo.max_tokens_per_step = config.scheduler.max_num_batched_tokens;
  mo.logger = deps.logger.child("model");
  KVS_ASSIGN_OR_RETURN(local->model, model::LlamaModel::Load(model_dir, mo));
  const model::ModelConfig& mc = local->model->config();

  KVS_ASSIGN_OR_RETURN(local->stats, LoadStatsFor(config, model_dir, *local->model, deps.logger));
  local->compression = compression::ContextFor(*local->model, local->stats.get(), &local->clock);
  deps.compression = &local->compression;

  if (kind == config::Backend::kCuda) {
    KVS_ASSIGN_OR_RETURN(local->backend,
                         deps.make_cuda_backend(config, *local->model, &local->compression, deps.logger));
  } else {
    KVS_ASSIGN_OR_RETURN(local->backend, MakeCpuBackend(config, *local->model, &local->compression, deps.logger));
  }

  ModelInfo info;
  info.name = config.model.served_name.empty()
                  ? std::filesystem::path(model_dir).lexically_normal().filename().string()
                  : config.model.served_name;
  if (info.name.empty()) info.name = std::filesystem::path(model_dir).parent_path().filename().string();
  info.max_model_len = mc.max_context();
  if (config.model.max_model_len > 0) info.max_model_len = std::min(info.max_model_len, config.model.max_model_len);
  info.eos_token_ids = mc.eos_token_ids;
  info.vocab_size = mc.vocab_size;
  local->engine = std::make_unique<Engine>(config, info, *local->backend.manager, *local->backend.runner,
                                           std::move(deps));
  local->engine->Start();
  return std::unique_ptr<ServingEngine>(std::move(local));
}

}  // namespace kvserve::engine
