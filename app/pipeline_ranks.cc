#include "app/pipeline_ranks.h"

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/clock.h"
#include "config/config_loader.h"
#include "engine/backend.h"
#include "model/model_config.h"
#include "parallel/pipeline_link.h"
#include "parallel/pipeline_worker.h"
#include "parallel/rank_handshake.h"
#if defined(KVSERVE_HAVE_MPI)
#include "parallel/mpi_communicator.h"
#endif

namespace kvserve::app {

struct PipelineRanks::State {
  base::Logger logger;
  base::SteadyClock clock;
#if defined(KVSERVE_HAVE_MPI)
  std::unique_ptr<parallel::MpiEnvironment> env;
#endif
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<parallel::PipelineLink> link;
  parallel::StageLayers layers;
  int num_layers = 0;
};

namespace {

// What a pipeline split does not carry yet: refused by name rather than run wrong.
absl::Status CheckPipelineConfig(const config::Config& c) {
  auto refuse = [](auto&&... parts) { return absl::UnimplementedError(absl::StrCat(parts...)); };
  if (c.parallel.tensor != 1) {
    return refuse("parallel.tensor=", c.parallel.tensor,
                  ": tensor parallelism is not implemented yet");
  }
  if (c.engine.backend == config::Backend::kCuda) {
    return refuse("engine.backend=cuda: pipeline parallelism runs on the CPU backend only for now");
  }
  if (c.cache.demote_kv_bytes > 0)
    return refuse("cache.demote_kv_bytes > 0 under parallel.pipeline > 1");
  if (!c.cache.remote_kv_url.empty())
    return refuse("cache.remote_kv_url under parallel.pipeline > 1");
  return absl::OkStatus();
}

}  // namespace

PipelineRanks::PipelineRanks(std::unique_ptr<State> state) : state_(std::move(state)) {}
PipelineRanks::~PipelineRanks() = default;

int PipelineRanks::rank() const { return state_->comm->rank(); }

absl::StatusOr<std::unique_ptr<PipelineRanks>> PipelineRanks::Start(
    const config::Config& config, const std::string& model_dir, const base::Logger& logger,
    std::function<void(const absl::Status&)> on_failure) {
#if !defined(KVSERVE_HAVE_MPI)
  (void)config, (void)model_dir, (void)logger, (void)on_failure;
  return absl::UnimplementedError(
      "parallel.tensor x parallel.pipeline > 1 needs MPI, and this build has none (tools/setup.sh "
      "installs OpenMPI)");
#else
  KVS_RETURN_IF_ERROR(CheckPipelineConfig(config));
  auto state = std::make_unique<State>();
  state->logger = logger;
  KVS_ASSIGN_OR_RETURN(state->env, parallel::MpiEnvironment::Init(nullptr, nullptr));
  const int world = config.parallel.world();
  if (state->env->world_size() != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.tensor x parallel.pipeline = ", config.parallel.tensor, " x ",
                     config.parallel.pipeline, " = ", world, " ranks, but mpirun started ",
                     state->env->world_size(), " (mpirun -np must equal it)"));
  }
  KVS_ASSIGN_OR_RETURN(
      state->comm, parallel::MpiCommunicator::Create(*state->env, state->clock, absl::Seconds(60),
                                                     parallel::MpiCommunicator::Options{}));
  const int rank = state->comm->rank();
  state->logger = logger.child(absl::StrCat("rank", rank));
  KVS_RETURN_IF_ERROR(parallel::RunRankHandshake(
      *state->comm, parallel::MakeRankFingerprint(model_dir, config::DumpJson(config)),
      state->clock, absl::Seconds(60)));
  KVS_ASSIGN_OR_RETURN(const model::ModelConfig mc, model::LoadModelConfig(model_dir));
  if (mc.num_layers < world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.pipeline=", world, ": the model has only ", mc.num_layers, " layers"));
  }
  state->num_layers = mc.num_layers;
  state->layers = parallel::StageLayersFor(mc.num_layers, rank, world);
  parallel::PipelineLink::Options lo;
  lo.on_failure = std::move(on_failure);
  state->link = std::make_unique<parallel::PipelineLink>(*state->comm, std::move(lo));

  std::unique_ptr<PipelineRanks> ranks(new PipelineRanks(std::move(state)));
  // Equal block counts on every rank: each budget is scaled to this rank's share of the
  // largest stage's layers (every layer's block has the same bytes), so
  // floor(budget x mine / largest / (mine x per layer)) = floor(budget / (largest x per layer)).
  int largest = 0;
  for (int s = 0; s < world; ++s) {
    const parallel::StageLayers l = parallel::StageLayersFor(mc.num_layers, s, world);
    largest = std::max(largest, l.end - l.begin);
  }
  const uint64_t mine =
      static_cast<uint64_t>(ranks->state_->layers.end - ranks->state_->layers.begin);
  config::Config& sc = ranks->stage_config_;
  sc = config;
  sc.cache.kv_bytes = config.cache.kv_bytes * mine / static_cast<uint64_t>(largest);
  sc.cache.host_swap_bytes = config.cache.host_swap_bytes * mine / static_cast<uint64_t>(largest);
  sc.cache.layer_groups = false;  // one table per sequence: the step message's block tables
  ranks->state_->logger.info(
      "pipeline stage %d of %d (pid %d): layers [%d, %d) of %d, KV budget %d of %d bytes", rank,
      world, static_cast<int>(getpid()), ranks->state_->layers.begin, ranks->state_->layers.end,
      mc.num_layers, static_cast<int64_t>(sc.cache.kv_bytes),
      static_cast<int64_t>(config.cache.kv_bytes));
  return ranks;
#endif
}

void PipelineRanks::ConfigureEngine(engine::EngineDeps& deps) {
  deps.layer_begin = state_->layers.begin;
  deps.layer_end = state_->layers.end;
  deps.stage_link = state_->link.get();
}

void PipelineRanks::RequestStop() { state_->link->RequestStop(); }

void PipelineRanks::Shutdown() {
  State& s = *state_;
  std::vector<int64_t> ns = s.link->handoff_ns();
  if (!ns.empty()) {
    std::sort(ns.begin(), ns.end());
    s.logger.info("pipeline: %d steps, hand-off per step median %.1f us, p90 %.1f us",
                  static_cast<int64_t>(ns.size()), static_cast<double>(ns[ns.size() / 2]) * 1e-3,
                  static_cast<double>(ns[ns.size() * 9 / 10]) * 1e-3);
  }
  if (absl::Status st = s.link->Shutdown(); !st.ok()) {
    s.logger.error("pipeline: cannot stop the workers: %s", std::string(st.message()));
  }
}

int PipelineRanks::RunWorker(const std::string& model_dir) {
  State& s = *state_;
  model::ModelOptions mo;
  mo.threads = stage_config_.engine.threads;
  mo.max_tokens_per_step = stage_config_.scheduler.max_num_batched_tokens;
  mo.logger = s.logger.child("model");
  mo.max_context = stage_config_.model.max_model_len;
  mo.layer_begin = s.layers.begin;
  mo.layer_end = s.layers.end;
  mo.stage_link = s.link.get();
  absl::StatusOr<std::unique_ptr<model::LlamaModel>> model = model::LlamaModel::Load(model_dir, mo);
  if (!model.ok()) {
    s.logger.error("cannot load the stage's layers: %s", std::string(model.status().message()));
    return 1;
  }
  absl::StatusOr<engine::Backend> backend =
      engine::MakeCpuBackend(stage_config_, **model, nullptr, s.logger);
  if (!backend.ok()) {
    s.logger.error("cannot allocate the stage's KV pool: %s",
                   std::string(backend.status().message()));
    return 1;
  }
  engine::LogStageMemory(**model, backend->storage->layout(), s.logger);
  s.logger.info("pipeline worker rank %d ready, %d KV blocks", rank(),
                static_cast<int64_t>(backend->storage->num_blocks()));
  absl::Status st = parallel::RunPipelineWorker(*s.link, **model, *backend->storage,
                                                backend->swap.get(), s.logger);
  if (!st.ok()) {
    s.logger.error("pipeline worker stops: %s", std::string(st.message()));
    return 1;
  }
  return 0;
}

}  // namespace kvserve::app
