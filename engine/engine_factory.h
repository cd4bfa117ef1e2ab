// Builds the serving engine for a model directory: tokenizer-independent, owns the loop
// thread, the scheduler, the KV cache and the model runner.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/logger.h"
#include "compression/compression_policy.h"
#include "config/config.h"
#include "engine/backend.h"
#include "engine/engine_client.h"
#include "engine/engine_observer.h"
#include "lora/active_adapters.h"
#include "lora/adapter_registry.h"
#include "model/stage_link.h"
#include "speculative/draft_proposer.h"

namespace kvserve::engine {

// The running engine. Destroying it stops the loop (pending requests end with kAbort).
class ServingEngine : public EngineClient {
 public:
  // Stops admitting (Submit returns Unavailable); running requests continue.
  virtual void StartDrain() = 0;
  // Number of accepted requests that have not finished yet.
  virtual int InFlight() const = 0;
  // Aborts everything still in flight (end of the drain timeout).
  virtual void AbortAll() = 0;
  // Max tokens of prompt + completion the model accepts.
  virtual int64_t max_model_len() const = 0;
};

class KvTierBridge;  // kv_tier_bridge.h

struct EngineDeps {
  base::Logger logger;
  EngineObserver* observer = nullptr;        // may be null; must outlive the engine
  std::shared_ptr<const base::Clock> clock;  // null: SteadyClock
  // Model-wide compression inputs (RoPE table, TriAttention statistics); null: only `full`.
  // Set by CreateEngine; must outlive the engine.
  const compression::PolicyContext* compression = nullptr;
  // The CUDA backend's factory (cuda::MakeCudaBackend), given by callers that link the CUDA
  // code statically (gpu tests, benchmarks). engine/ itself never links CUDA code.
  CudaBackendFactory make_cuda_backend;
  // Loads the CUDA backend on demand (app/: LoadCudaBackendModule, engine/cuda_backend_loader.h),
  // called only when make_cuda_backend is empty and engine.backend resolved to cuda, so a
  // process that runs on the CPU never loads cuBLAS. A load failure fails engine.backend=cuda
  // with its message and sends auto to the CPU. With neither set, cuda is refused and auto
  // runs on the CPU.
  std::function<absl::StatusOr<CudaBackendFactory>()> load_cuda_backend;
  // The remote KV tier's engine-side bridge; null: no remote tier. Must outlive the engine.
  KvTierBridge* kv_tiers = nullptr;
  // Draft-model speculation (speculative.method draft): the proposer, null when no draft model
  // is loaded (requests asking for method draft are then refused). CreateEngine sets it from
  // speculative.draft_model; a caller may inject one instead (tests, benchmarks), kept when
  // speculative.draft_model is empty. Must outlive the engine.
  speculative::DraftProposer* draft_proposer = nullptr;
  // The adaptive draft length's row cost (speculative::StepCost::row_cost), which CreateEngine
  // measures at start-up when the server speculates by default or loads a draft model (CPU
  // backend); 0: speculative::kDefaultRowCost.
  double spec_row_cost = 0.0;
  // Pipeline parallelism (docs/parallelism.md): this process is stage 0 and runs layers
  // [layer_begin, layer_end) (layer_end 0: all); `stage_link` reaches the other stages.
  // Default: the whole model in this process.
  int layer_begin = 0;
  int layer_end = 0;
  model::StageLink* stage_link = nullptr;
  // LoRA (config lora.*): the adapters by name, and the engine thread's table of those its
  // requests use (the runner reads it). Set by CreateEngine when lora.active(); must outlive
  // the engine.
  lora::AdapterRegistry* lora = nullptr;
  lora::ActiveAdapters* lora_active = nullptr;
};

absl::StatusOr<std::unique_ptr<ServingEngine>> CreateEngine(const config::Config& config,
                                                            const std::string& model_dir,
                                                            EngineDeps deps);

}  // namespace kvserve::engine
