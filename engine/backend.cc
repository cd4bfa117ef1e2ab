#include "engine/backend.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/host_kv_cache.h"
#include "config/fields.h"
#include "engine/cpu_model_runner.h"

namespace kvserve::engine {

BackendSupport ThisBuildSupports() {
  BackendSupport s;
#if defined(KVSERVE_HAVE_CUDA)
  s.cuda_compiled = true;
#endif
  // Known only to the caller that can inject the CUDA backend (CreateEngine sets it from
  // EngineDeps::make_cuda_backend / load_cuda_backend).
  s.cuda_runner_available = false;
  return s;
}

absl::StatusOr<config::Backend> ResolveBackend(config::Backend requested, const kernels::DeviceProbe& probe,
                                               const BackendSupport& support, std::string& why) {
  // The reason CUDA cannot run, or empty when it can.
  std::string missing;
  if (!support.cuda_compiled) {
    missing = "this kvserve was built without CUDA (no nvcc at build time)";
  } else if (!probe.usable()) {
    missing = absl::StrCat("no usable CUDA device (", probe.reason, ")");
  } else if (!support.cuda_runner_available) {
    missing = absl::StrCat("CUDA device ", probe.device_name,
                           " found, but this program was built without the CUDA backend "
                           "(no EngineDeps::make_cuda_backend or load_cuda_backend)");
  }
  switch (requested) {
    case config::Backend::kCpu:
      why = "backend: cpu (engine.backend=cpu)";
      return config::Backend::kCpu;
    case config::Backend::kCuda:
      if (!missing.empty()) {
        return absl::FailedPreconditionError(absl::StrCat("engine.backend=cuda: ", missing, "; use auto or cpu"));
      }
      why = absl::StrCat("backend: cuda on ", probe.device_name, " (engine.backend=cuda)");
      return config::Backend::kCuda;
    case config::Backend::kAuto:
      if (missing.empty()) {
        why = absl::StrCat("backend: cuda on ", probe.device_name, " (engine.backend=auto)");
        return config::Backend::kCuda;
      }
      why = absl::StrCat("backend: cpu, ", missing, " (engine.backend=auto)");
      return config::Backend::kCpu;
  }
  return absl::InvalidArgumentError("engine.backend: unknown value");
}

absl::Status CudaReadsKvPrecision(const config::CacheConfig& c) {
  if (c.lowrank_key_rank > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cache.lowrank_key_rank=", c.lowrank_key_rank,
        ": the CUDA kernels read no low-rank keys (low-rank key tiers run on the CPU backend only, "
        "engine.backend=cpu)"));
  }
  if (c.demote_kv_bytes > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cache.demote_kv_bytes=", c.demote_kv_bytes,
        ": the CUDA kernels read no demotion tiers (mixed-precision block tables run on the CPU backend only, "
        "engine.backend=cpu)"));
  }
  return absl::OkStatus();
}

cache::LayerGroups LayerGroupsFor(const config::Config& config, const model::ModelConfig& model) {
  if (!config.cache.layer_groups) return cache::PlanLayerGroups({}, 0);
  return cache::PlanLayerGroups(model.layer_window, model.max_context());
}

cache::KvLayout ConfiguredKvLayout(const config::CacheConfig& c, const model::LlamaModel& model) {
  return cache::WithPrecision(model.KvLayoutFor(c.block_size, c.kv_dtype), config::EffectiveKDtype(c),
                              config::EffectiveVDtype(c), c.kv_int4_group);
}

void LogStageMemory(const model::LlamaModel& model, const cache::KvLayout& layout, const base::Logger& logger) {
  logger.info("stage memory: layers [%d, %d) of %d, weights %d bytes, KV %d bytes per token", model.layer_begin(),
              model.layer_end(), model.config().num_layers, static_cast<int64_t>(model.weights().resident_bytes()),
              static_cast<int64_t>(layout.bytes_per_block() / static_cast<size_t>(layout.block_size)));
}

absl::StatusOr<Backend> MakeCpuBackend(const config::Config& config, model::LlamaModel& model,
                                       const compression::PolicyContext* compression, const base::Logger& logger) {
  cache::KvLayout layout = ConfiguredKvLayout(config.cache, model);
  if (config.cache.lowrank_key_rank > 0 && (compression == nullptr || compression->key_basis == nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cache.lowrank_key_rank=", config.cache.lowrank_key_rank,
        ": needs the model's low-rank key basis (compression.key_basis_path; write it with `kvserve calibrate`)"));
  }
  const cache::LayerGroups groups = LayerGroupsFor(config, model.config());
  KVS_ASSIGN_OR_RETURN(
      cache::HostKvCache kv,
      cache::MakeHostKvCache(config.cache, layout, logger.child("cache"), &groups));
  Backend b;
  b.kind = config::Backend::kCpu;
  b.storage = std::move(kv.storage);
  b.swap = std::move(kv.swap);
  b.manager = std::move(kv.manager);
  std::vector<cache::KvStorage*> tiers;
  for (auto& t : kv.demote_tiers) {
    tiers.push_back(t.get());
    b.demote_tiers.push_back(std::move(t));
  }
  if (config.cache.lowrank_key_rank > 0) {
    auto packed = compression::PackedKeyBasis::Create(
        *compression->key_basis, config.cache.lowrank_key_rank,
        config.cache.lowrank_query_aware ? compression::KeyBasisKind::kQueryAware : compression::KeyBasisKind::kPca);
    if (!packed.ok()) {
      return absl::Status(packed.status().code(),
                          absl::StrCat("cache.lowrank_key_rank=", config.cache.lowrank_key_rank, ": ",
                                       packed.status().message()));
    }
    b.key_basis = std::make_unique<compression::PackedKeyBasis>(std::move(*packed));
  }
  b.runner = std::make_unique<CpuModelRunner>(model, *b.storage, b.swap.get(), compression, tiers,
                                              b.key_basis.get(), groups);
  return b;
}

}  // namespace kvserve::engine
