// `kvserve serve` as one rank of a model split over processes (mpirun -np N with N =
// parallel.tensor x parallel.pipeline > 1; docs/parallelism.md). World size 1 never gets here:
// today's single-process path is unchanged.
//
//   every rank: MPI init ─ N == T x P? ─ handshake (same model, configuration, binary)
//               ─ its stage's layers [b, e) and a KV pool sized so block ids agree
//   rank 0:     the server and engine as usual; its model is stage 0 with a PipelineLink;
//               at exit tells the workers to stop
//   ranks > 0:  RunPipelineWorker until rank 0's shutdown, or a failure (exit non-zero)
//
// Pipeline parallelism only, one rank per stage (parallel.tensor 1), CPU backend.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/logger.h"
#include "config/config.h"
#include "engine/engine_factory.h"

namespace kvserve::app {

class PipelineRanks {
 public:
  // Initialises MPI and checks the ranks agree. `on_failure` runs once (on the engine's
  // thread) when a step exchange fails on rank 0: a peer died or hangs.
  static absl::StatusOr<std::unique_ptr<PipelineRanks>> Start(
      const config::Config& config, const std::string& model_dir, const base::Logger& logger,
      std::function<void(const absl::Status&)> on_failure);
  ~PipelineRanks();

  int rank() const;
  bool leader() const { return rank() == 0; }
  // The configuration this rank runs: the KV budgets scaled to its share of the layers (so
  // every rank's pool has the same number of blocks), layer groups off.
  const config::Config& stage_config() const { return stage_config_; }

  // Rank 0: the stage and link for CreateEngine.
  void ConfigureEngine(engine::EngineDeps& deps);
  // Rank 0, on SIGTERM/SIGINT (any thread): a step still waiting on a stage soon fails.
  void RequestStop();
  // Rank 0, after the engine stopped: releases the workers; logs the hand-off costs.
  void Shutdown();
  // Ranks > 0: loads the stage, serves steps until shutdown; the process exit code.
  int RunWorker(const std::string& model_dir);

  struct State;

 private:
  explicit PipelineRanks(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  config::Config stage_config_;
};

}  // namespace kvserve::app
