// The CUDA backend module's exported entry points (engine/cuda_backend_module.h): the only
// symbols libkvserve_cuda_backend.so exports. Everything else in it (this folder, the CUDA
// kernels, cuBLAS, and the module's own static copy of kvserve's libraries) stays hidden.
#include <exception>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_backend.h"
#include "engine/cuda_backend_module.h"

namespace kvserve::cuda {
namespace {

class CudaBackendModuleImpl final : public engine::CudaBackendModule {
 public:
  absl::StatusOr<engine::Backend> MakeBackend(const config::Config& config, const model::LlamaModel& model,
                                              const compression::PolicyContext* compression,
                                              const base::Logger& logger) const noexcept override {
    // Exceptions (std::bad_alloc from a host vector, anything from a library) end here: the
    // caller is another copy of the C++ runtime state and must only ever see a Status.
    try {
      return MakeCudaBackend(config, model, compression, logger);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("cuda backend: ", e.what()));
    } catch (...) {
      return absl::InternalError("cuda backend: unknown exception");
    }
  }
};

}  // namespace
}  // namespace kvserve::cuda

extern "C" {

__attribute__((visibility("default"))) const char* kvserve_cuda_backend_build_id() {
  // Computed once; a function-local constant, not mutable state.
  static const std::string id = kvserve::engine::CudaModuleBuildId();
  return id.c_str();
}

__attribute__((visibility("default"))) const kvserve::engine::CudaBackendModule* kvserve_cuda_backend_module() {
  static const kvserve::cuda::CudaBackendModuleImpl module;
  return &module;
}

}  // extern "C"
