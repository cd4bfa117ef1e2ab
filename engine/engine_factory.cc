#include "engine/engine_factory.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/block_hasher.h"
#include "compression/key_basis.h"
#include "compression/policy_factory.h"
#include "compression/triattention_stats.h"
#include "config/fields.h"
#include "engine/backend.h"
#include "engine/cpu_model_runner.h"
#include "engine/engine.h"
#include "engine/kv_tier_bridge.h"
#include "gguf/gguf_source.h"
#include "kernels/device_probe.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "speculative/draft_model_check.h"
#include "speculative/draft_model_proposer.h"

namespace kvserve::engine {
namespace {

// Owns the model, the KV cache and the runner, and forwards the client API to the Engine.
// Members are declared in dependency order so destruction stops the loop first.
class LocalEngine final : public ServingEngine {
 public:
  base::SteadyClock clock;  // compression phase timings (the draft model's rounds too)
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<compression::TriAttentionStats> stats;  // null: triattention unavailable
  std::unique_ptr<compression::KeyBasis> key_basis;      // null: no low-rank key tier
  std::unique_ptr<speculative::DraftModelProposer> draft;  // null: no draft model
  compression::PolicyContext compression;
  Backend backend;
  // LoRA adapters (null: lora.active() is false). Before the engine: it holds pins into them.
  std::unique_ptr<lora::AdapterRegistry> lora;
  std::unique_ptr<lora::ActiveAdapters> lora_active;
  std::unique_ptr<Engine> engine;
  // Declared after the engine: destroyed first, so its I/O thread never sees a dead engine.
  std::atomic<Engine*> wake_target{nullptr};
  std::unique_ptr<KvTierBridge> tiers;

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
  bool serves_adapters() const override { return engine->serves_adapters(); }
  bool HasAdapter(const std::string& name) const override { return engine->HasAdapter(name); }
  std::vector<AdapterCard> ListAdapters() const override { return engine->ListAdapters(); }
  absl::Status LoadAdapter(const std::string& name, const std::string& path) override {
    return engine->LoadAdapter(name, path);
  }
  absl::Status UnloadAdapter(const std::string& name) override {
    return engine->UnloadAdapter(name);
  }
};

// lora.*: the registry with the configured adapters, each loaded and checked now (a bad
// directory fails start-up naming the adapter, file and field), and the runner's table.
absl::Status SetUpLora(const config::Config& config, config::Backend kind, LocalEngine& local,
                       EngineDeps& deps) {
  if (!config.lora.active()) return absl::OkStatus();
  if (kind != config::Backend::kCpu) {
    return absl::FailedPreconditionError(
        "lora: the CUDA backend does not run LoRA adapters yet (engine.backend=cpu)");
  }
  lora::RegistryOptions ro;
  ro.max_loras = config.lora.max_loras;
  ro.max_lora_rank = config.lora.max_lora_rank;
  ro.max_cpu_loras =
      config.lora.max_cpu_loras > 0
          ? config.lora.max_cpu_loras
          : std::max(config.lora.max_loras, static_cast<int>(config.lora.adapters.size()));
  KVS_ASSIGN_OR_RETURN(local.lora, lora::AdapterRegistry::Create(local.model->config(), ro));
  for (size_t i = 0; i < config.lora.adapters.size(); ++i) {
    const std::string& e = config.lora.adapters[i];
    const size_t eq = e.find('=');
    const std::string name = e.substr(0, eq);
    if (absl::Status st = local.lora->Add(name, e.substr(eq + 1), /*load_now=*/true); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("lora.adapters[", i, "] (", name, "): ", st.message()));
    }
  }
  local.lora_active = std::make_unique<lora::ActiveAdapters>();
  auto* runner = dynamic_cast<CpuModelRunner*>(local.backend.runner.get());
  if (runner == nullptr)
    return absl::InternalError("lora: the backend's runner is not the CPU runner");
  runner->EnableLora(*local.lora_active, ro.max_loras, ro.max_lora_rank);
  deps.lora = local.lora.get();
  deps.lora_active = local.lora_active.get();
  return absl::OkStatus();
}

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

// The low-rank key basis, loaded only when a low-rank tier is configured
// (cache.lowrank_key_rank > 0); it must exist and match the model.
absl::StatusOr<std::unique_ptr<compression::KeyBasis>> LoadKeyBasisFor(const config::Config& config,
                                                                      const std::string& model_dir,
                                                                      const model::LlamaModel& model,
                                                                      const base::Logger& logger) {
  if (config.cache.lowrank_key_rank == 0) return std::unique_ptr<compression::KeyBasis>();
  const std::string path = compression::KeyBasisPathFor(config.compression.key_basis_path, model_dir);
  auto basis = compression::LoadKeyBasisForModel(path, model.config(), model.rope_inv_freq());
  if (!basis.ok()) {
    return absl::Status(basis.status().code(),
                        absl::StrCat("compression.key_basis_path (needed by cache.lowrank_key_rank=",
                                     config.cache.lowrank_key_rank, "): ", basis.status().message()));
  }
  logger.info("low-rank key basis loaded from %s (rank %d of %d)", path, config.cache.lowrank_key_rank,
              basis->head_dim);
  return std::make_unique<compression::KeyBasis>(std::move(*basis));
}

// What replicas sharing remote blocks must agree on: the model (config.json and the weights'
// file sizes) and the settings that shape KV values (kv_block_record.h checks the layout).
cache::KvTierIdentity TierIdentity(const config::Config& config, const std::string& model_dir,
                                   const cache::KvLayout& layout) {
  std::string model_id;
  std::error_code ec;
  if (std::ifstream in(std::filesystem::path(model_dir) / "config.json"); in) {
    std::ostringstream s;
    s << in.rdbuf();
    model_id = s.str();
  }
  std::vector<std::string> weights;
  // A GGUF model is one file (or a directory of them): its name and size stand for it, as a
  // directory's safetensors files do (the metadata, config included, is inside the file).
  if (std::filesystem::is_regular_file(model_dir, ec)) {
    const std::filesystem::path p(model_dir);
    weights.push_back(absl::StrCat(p.filename().string(), "=", std::filesystem::file_size(p, ec)));
  }
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec)) {
    if (e.path().extension() == ".safetensors" || e.path().extension() == ".gguf") {
      weights.push_back(absl::StrCat(e.path().filename().string(), "=", e.file_size(ec)));
    }
  }
  std::sort(weights.begin(), weights.end());
  for (const auto& w : weights) absl::StrAppend(&model_id, "\n", w);
  cache::KvTierIdentity id;
  id.model_fingerprint = cache::BlockHasher::HashString(model_id);
  // The kv_dtype name alone when K and V share it (hashes of existing deployments stay put).
  std::string precision(config::Name(config.cache.kv_dtype));
  if (!layout.uniform() || layout.k_dtype() != config.cache.kv_dtype) {
    precision = absl::StrCat(std::string(config::Name(layout.k_dtype())), "+",
                             std::string(config::Name(layout.v_dtype())), "/g", layout.int4_group);
  }
  id.config_hash = cache::BlockHasher::HashString(
      absl::StrCat(precision, "/", config.cache.block_size, "/", config.model.served_name));
  id.layout = layout;
  return id;
}

absl::StatusOr<std::unique_ptr<KvTierBridge>> MakeRemoteTier(const config::Config& config,
                                                             const std::string& model_dir, const Backend& backend,
                                                             std::atomic<Engine*>* wake_target,
                                                             const base::Clock* clock, const base::Logger& logger) {
  const config::CacheConfig& c = config.cache;
  KVS_ASSIGN_OR_RETURN(cache::RedisEndpoint ep, cache::ParseRedisUrl(c.remote_kv_url));
  if (!c.enable_prefix_caching) {
    return absl::InvalidArgumentError("cache.remote_kv_url needs cache.enable_prefix_caching=true");
  }
  if (backend.swap == nullptr || !backend.manager->host_cache_enabled()) {
    return absl::InvalidArgumentError(
        "cache.remote_kv_url needs the host prefix tier (cache.host_cache_bytes > 0): remote blocks land there");
  }
  cache::RemoteKvTierOptions o;
  o.store.endpoint = ep;
  o.store.timeout_seconds = c.remote_kv_timeout_seconds;
  o.store.ttl_seconds = c.remote_kv_ttl_seconds;
  o.identity = TierIdentity(config, model_dir, backend.storage->layout());
  logger.info("remote KV tier: redis %s:%d db %d, %s, timeout %.3fs, ttl %ds", ep.host, ep.port, ep.db,
              c.remote_kv_write_back ? "write-back on host-tier eviction" : "write-through on commit",
              c.remote_kv_timeout_seconds, c.remote_kv_ttl_seconds);
  auto remote = std::make_unique<cache::RemoteKvTier>(o, clock, logger.child("kv-tier"), [wake_target] {
    if (Engine* e = wake_target->load()) e->WakeForTier();
  });
  return std::make_unique<KvTierBridge>(*backend.storage, *backend.swap, std::move(remote), logger.child("kv-tier"));
}

// The draft model of speculative.draft_model (CPU backend only), checked against the target's
// tokenizer; null when none is configured or the backend is not the CPU's (the CUDA runner
// verifies n-gram drafts, but the draft model runs on the CPU only).
absl::StatusOr<std::unique_ptr<speculative::DraftModelProposer>> LoadDraftModel(
    const config::Config& config, const std::string& model_dir, const model::LlamaModel& target,
    config::Backend kind, const base::Clock* clock, const base::Logger& logger) {
  const config::SpeculativeConfig& sc = config.speculative;
  if (sc.draft_model.empty()) return std::unique_ptr<speculative::DraftModelProposer>();
  if (kind != config::Backend::kCpu) {
    logger.warn(
        "speculative.draft_model=%s not loaded: the draft model runs on the cpu backend "
        "only, not the %s backend (requests asking for method draft are refused)",
        sc.draft_model, std::string(config::Name(kind)));
    return std::unique_ptr<speculative::DraftModelProposer>();
  }
  auto draft_config = model::LoadModelConfig(sc.draft_model);
  if (!draft_config.ok()) {
    return absl::Status(draft_config.status().code(),
                        absl::StrCat("speculative.draft_model=", sc.draft_model, ": ",
                                     draft_config.status().message()));
  }
  KVS_RETURN_IF_ERROR(speculative::CheckDraftCompatible(model_dir, target.config().vocab_size,
                                                        sc.draft_model, draft_config->vocab_size));
  speculative::DraftModelOptions o;
  o.block_size = config.cache.block_size;
  o.kv_bytes = sc.draft_kv_bytes;
  o.threads = config.engine.threads;
  o.max_tokens_per_step = config.scheduler.max_num_batched_tokens;
  o.max_context = config.model.max_model_len;
  o.guess_cost = static_cast<double>(draft_config->num_active_parameters()) /
                 static_cast<double>(std::max<int64_t>(1, target.config().num_active_parameters()));
  o.clock = clock;
  KVS_ASSIGN_OR_RETURN(auto draft, speculative::DraftModelProposer::Load(
                                       sc.draft_model, target.config().vocab_size, o,
                                       logger.child("draft")));
  logger.info("draft model %s loaded: %d layers, hidden %d, its own KV pool of %d MiB, a guess costs %.2f of a "
              "target step",
              sc.draft_model, draft->model_config().num_layers, draft->model_config().hidden_size,
              static_cast<int>(sc.draft_kv_bytes >> 20), o.guess_cost);
  return draft;
}

// The adaptive draft length's costs on this machine (speculative/step_cost.h), when the server
// speculates by default or has a draft model: the target's row cost, and the draft's guess
// cost in place of the parameter ratio. speculative.row_cost / draft_guess_cost, when set,
// are used as given. Start-up only (a few forwards of each model on a scratch pool); CPU
// backend only. A failed measurement keeps the defaults (logged). deps.spec_row_cost set by
// the caller (tests) skips all of it.
void MeasureSpeculationCosts(const config::Config& config, config::Backend kind, model::LlamaModel& target,
                             speculative::DraftModelProposer* draft, const base::Clock& clock, EngineDeps& deps) {
  const config::SpeculativeConfig& sc = config.speculative;
  const bool speculates = sc.method != config::SpeculativeMethod::kNone || draft != nullptr;
  if (kind != config::Backend::kCpu || !speculates || deps.spec_row_cost > 0.0) return;
  if (deps.stage_link != nullptr) {  // a pipeline stage's forward runs only inside a step
    if (sc.row_cost > 0.0) deps.spec_row_cost = sc.row_cost;
    return;
  }
  if (sc.row_cost > 0.0) deps.spec_row_cost = sc.row_cost;
  if (draft != nullptr && sc.draft_guess_cost > 0.0) draft->set_guess_cost(sc.draft_guess_cost);
  const bool measure_guess = draft != nullptr && sc.draft_guess_cost <= 0.0;
  if (sc.row_cost > 0.0 && !measure_guess) return;
  auto t = speculative::MeasureStepCost(target, clock);
  if (!t.ok()) {
    deps.logger.warn("speculation: step cost not measured (%s); defaults kept", t.status().ToString());
    return;
  }
  if (sc.row_cost <= 0.0) {
    // Never below the default: the forward pass is not all a verify row costs (its sampling
    // and bookkeeping are not timed), and on kvs-tiny, whose forward rows are nearly free (c
    // 0.02 to 0.05), longer n-gram drafts at batch 8 measured 0.79x against 1.02x with c =
    // 0.1. Never above 1 (a row dearer than streaming the weights): beyond it is a disturbed
    // measurement (a loaded machine; a sanitizer build measured up to the clamp of 4).
    deps.spec_row_cost = std::clamp(t->row_cost(), speculative::kDefaultRowCost, 1.0);
    deps.logger.info("speculation: a target step costs %.3f ms + %.3f ms per row (row cost %.3f, %.3f used)",
                     t->fixed_s * 1e3, t->row_s * 1e3, t->row_cost(), deps.spec_row_cost);
  }
  if (!measure_guess) return;
  auto d = draft->MeasureStepCost(clock);
  if (!d.ok()) {
    deps.logger.warn("speculation: draft step cost not measured (%s); guess cost %.2f kept",
                     d.status().ToString(), draft->guess_cost());
    return;
  }
  draft->set_guess_cost(t->guess_cost(*d));
  deps.logger.info("speculation: a draft step costs %.3f ms + %.3f ms per row (guess cost %.3f)", d->fixed_s * 1e3,
                   d->row_s * 1e3, draft->guess_cost());
}

// The draft model's KV pool comes out of cache.kv_bytes, as the demotion tiers' pools do: the
// server's KV memory is what the operator configured, and admission sizes the target's pool
// with the draft's KV already counted. Returns the configuration the target's pool is built
// from (the same as `config` without a draft model).
absl::StatusOr<config::Config> CarveDraftPool(const config::Config& config, config::Backend kind) {
  config::Config c = config;
  if (config.speculative.draft_model.empty() || kind != config::Backend::kCpu) return c;
  const uint64_t draft = config.speculative.draft_kv_bytes;
  const uint64_t demote = config.cache.demote_kv_bytes < config.cache.kv_bytes ? config.cache.demote_kv_bytes : 0;
  if (draft >= config.cache.kv_bytes - demote) {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculative.draft_kv_bytes=", draft, ": must be below cache.kv_bytes=", config.cache.kv_bytes,
        demote > 0 ? " less cache.demote_kv_bytes" : "",
        " (the draft model's KV pool comes out of the KV budget)"));
  }
  c.cache.kv_bytes -= draft;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingEngine>> CreateEngine(const config::Config& config,
                                                            const std::string& model_dir,
                                                            EngineDeps deps) {
  // One line that says which backend runs and why.
  std::string why;
  BackendSupport support = ThisBuildSupports();
  support.cuda_runner_available = static_cast<bool>(deps.make_cuda_backend) || static_cast<bool>(deps.load_cuda_backend);
  KVS_ASSIGN_OR_RETURN(config::Backend kind, ResolveBackend(config.engine.backend, kernels::ProbeCudaDevice(config.engine.device),
                                                            support, why));
  if (kind == config::Backend::kCuda) {
    if (absl::Status st = CudaReadsKvPrecision(config.cache); !st.ok()) {
      if (config.engine.backend == config::Backend::kCuda) {
        return absl::FailedPreconditionError(absl::StrCat("engine.backend=cuda: ", st.message()));
      }
      kind = config::Backend::kCpu;
      why = absl::StrCat("backend: cpu, ", st.message(), " (engine.backend=auto)");
    }
  }
  // GGUF files run on the CPU backend's quantized kernels only (no CUDA kernels for ggml
  // blocks yet): auto picks the CPU, an explicit cuda is refused before anything loads.
  if (kind == config::Backend::kCuda && gguf::IsGgufSource(model_dir)) {
    if (config.engine.backend == config::Backend::kCuda) {
      return absl::FailedPreconditionError(
          "engine.backend=cuda: GGUF models run on the CPU backend only (no CUDA kernels for ggml blocks yet)");
    }
    kind = config::Backend::kCpu;
    why = "backend: cpu, GGUF models run on the CPU backend's quantized kernels (engine.backend=auto)";
  }
  // Hugging Face quantized checkpoints (AWQ / GPTQ / compressed-tensors integer and FP8):
  // likewise CPU kernels only. Config errors surface at load, with the field named.
  if (kind == config::Backend::kCuda && !gguf::IsGgufSource(model_dir)) {
    const absl::StatusOr<model::ModelConfig> mc = model::LoadModelConfig(model_dir);
    if (mc.ok() && (mc->hf_quant || mc->fp8)) {
      const std::string what = mc->hf_quant ? mc->hf_quant->Describe() : mc->fp8->Describe();
      if (config.engine.backend == config::Backend::kCuda) {
        return absl::FailedPreconditionError(
            absl::StrCat("engine.backend=cuda: ", what,
                         " checkpoints run on the CPU backend only (the CUDA backend does not load them yet)"));
      }
      kind = config::Backend::kCpu;
      why = absl::StrCat("backend: cpu, ", what,
                         " checkpoints run on the CPU backend's quantized kernels (engine.backend=auto)");
    }
  }
  // LoRA adapters run on the CPU backend only (no CUDA kernels for the deltas yet): auto
  // picks the CPU; an explicit cuda was refused by the config's validation.
  if (kind == config::Backend::kCuda && config.lora.active()) {
    kind = config::Backend::kCpu;
    why = "backend: cpu, LoRA adapters run on the CPU backend only (engine.backend=auto)";
  }
  if (kind == config::Backend::kCuda && !deps.make_cuda_backend) {
    // Only now, with a usable device, is the CUDA backend (and with it cuBLAS) loaded.
    absl::StatusOr<CudaBackendFactory> factory = deps.load_cuda_backend();
    if (!factory.ok()) {
      if (config.engine.backend == config::Backend::kCuda) {
        return absl::FailedPreconditionError(absl::StrCat("engine.backend=cuda: ", factory.status().message()));
      }
      kind = config::Backend::kCpu;
      why = absl::StrCat("backend: cpu, ", factory.status().message(), " (engine.backend=auto)");
    } else {
      deps.make_cuda_backend = *std::move(factory);
    }
  }
  deps.logger.info("%s", why);
  auto local = std::make_unique<LocalEngine>();
  model::ModelOptions mo;
  mo.threads = config.engine.threads;
  mo.max_tokens_per_step = config.scheduler.max_num_batched_tokens;
  mo.logger = deps.logger.child("model");
  // The CUDA backend uploads straight from the mapped checkpoint: no host copy is packed.
  mo.pack_weights = kind != config::Backend::kCuda;
  mo.max_context = config.model.max_model_len;
  mo.layer_begin = deps.layer_begin;
  mo.layer_end = deps.layer_end;
  mo.stage_link = deps.stage_link;
  KVS_ASSIGN_OR_RETURN(local->model, model::LlamaModel::Load(model_dir, mo));
  const model::ModelConfig& mc = local->model->config();

  KVS_ASSIGN_OR_RETURN(local->stats, LoadStatsFor(config, model_dir, *local->model, deps.logger));
  local->compression = compression::ContextFor(*local->model, local->stats.get(), &local->clock);
  if (deps.stage_link != nullptr) {
    // Rank 0 holds the KV of its own layers only, and the policies score every layer's.
    local->compression.full_only_reason =
        "pipeline parallelism (parallel.pipeline > 1) runs full attention only for now";
  }
  KVS_ASSIGN_OR_RETURN(local->key_basis, LoadKeyBasisFor(config, model_dir, *local->model, deps.logger));
  local->compression.key_basis = local->key_basis.get();
  deps.compression = &local->compression;

  local->compression.window_tables =
      kind == config::Backend::kCpu && LayerGroupsFor(config, mc).enabled();
  if (kind == config::Backend::kCuda) {
    KVS_ASSIGN_OR_RETURN(local->backend,
                         deps.make_cuda_backend(config, *local->model, &local->compression, deps.logger));
  } else {
    KVS_ASSIGN_OR_RETURN(config::Config target_config, CarveDraftPool(config, kind));
    KVS_ASSIGN_OR_RETURN(local->backend, MakeCpuBackend(target_config, *local->model, &local->compression, deps.logger));
  }
  LogStageMemory(*local->model, local->backend.storage->layout(), deps.logger);

  ModelInfo info;
  // A GGUF file serves under its stem ("qwen3-8b-q4_k_m" for qwen3-8b-q4_k_m.gguf).
  const std::filesystem::path model_path = std::filesystem::path(model_dir).lexically_normal();
  info.name = config.model.served_name.empty()
                  ? (model_path.extension() == ".gguf" ? model_path.stem() : model_path.filename()).string()
                  : config.model.served_name;
  if (info.name.empty()) info.name = std::filesystem::path(model_dir).parent_path().filename().string();
  info.max_model_len = mc.max_context();
  if (config.model.max_model_len > 0) info.max_model_len = std::min(info.max_model_len, config.model.max_model_len);
  info.eos_token_ids = mc.eos_token_ids;
  info.vocab_size = mc.vocab_size;
  info.kv_window = mc.kv_window();
  if (!config.cache.remote_kv_url.empty()) {
    KVS_ASSIGN_OR_RETURN(local->tiers, MakeRemoteTier(config, model_dir, local->backend, &local->wake_target,
                                                      &local->clock, deps.logger));
    deps.kv_tiers = local->tiers.get();
  }
  KVS_ASSIGN_OR_RETURN(local->draft,
                       LoadDraftModel(config, model_dir, *local->model, kind, &local->clock, deps.logger));
  MeasureSpeculationCosts(config, kind, *local->model, local->draft.get(), local->clock, deps);
  // A proposer the caller injected (tests, benchmarks) stays when no draft model is configured.
  if (local->draft) deps.draft_proposer = local->draft.get();
  KVS_RETURN_IF_ERROR(SetUpLora(config, kind, *local, deps));
  local->engine = std::make_unique<Engine>(config, info, *local->backend.manager, *local->backend.runner,
                                           std::move(deps));
  local->wake_target.store(local->engine.get());
  local->engine->Start();
  return std::unique_ptr<ServingEngine>(std::move(local));
}

}  // namespace kvserve::engine
