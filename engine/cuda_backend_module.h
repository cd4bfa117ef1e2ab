// The seam between the kvserve binary and the CUDA backend module, libkvserve_cuda_backend.so
// (cuda/cuda_backend_module.cc). Both sides compile this header; it holds no CUDA types.
//
// Why a module: the CUDA backend links cuBLAS/cuBLASLt, and merely loading and initialising
// those costs a process ~150 MiB of RSS even when no GPU is ever used (docs/reliability.md).
// The binary links only the device probe (libcudart, which loads the driver lazily);
// CreateEngine loads the module only after engine.backend resolved to cuda (cuda, or auto with
// a usable device), so a CPU-only process never maps cuBLAS.
//
// The contract:
//  - The module exports two C symbols. kCudaModuleBuildIdSymbol returns its build id (plain C,
//    safe whatever build the file came from); kCudaModuleEntrySymbol returns the module's
//    CudaBackendModule and is called only once the build ids match.
//  - The build id names the source revision and the layout of every type that crosses the
//    boundary (CudaModuleBuildId): C++ objects (config::Config, engine::Backend,
//    absl::Status) cross it by layout, so a module from another build is refused, not called.
//  - No exception crosses: MakeBackend catches everything and returns a Status.
//  - The module carries its own static copy of kvserve's libraries with their symbols hidden
//    (-Wl,--exclude-libs,ALL); objects made by one copy are used by the other through the same
//    class definitions, and nothing relies on RTTI identity across the boundary.
//  - The module is never unloaded: the Backend it builds has its code and vtables there.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "compression/compression_policy.h"
#include "config/config.h"
#include "engine/backend.h"
#include "model/llama_model.h"

namespace kvserve::engine {

// The file name the build gives the module (next to the kvserve binary).
inline constexpr char kCudaModuleFileName[] = "libkvserve_cuda_backend.so";
// extern "C" const char* kvserve_cuda_backend_build_id();
inline constexpr char kCudaModuleBuildIdSymbol[] = "kvserve_cuda_backend_build_id";
// extern "C" const kvserve::engine::CudaBackendModule* kvserve_cuda_backend_module();
inline constexpr char kCudaModuleEntrySymbol[] = "kvserve_cuda_backend_module";

// What the module offers: one factory (cuda::MakeCudaBackend behind it). Owned by the module.
class CudaBackendModule {
 public:
  // Never throws; every failure (no device, out of memory, a CUDA error) is a Status.
  virtual absl::StatusOr<Backend> MakeBackend(const config::Config& config, const model::LlamaModel& model,
                                              const compression::PolicyContext* compression,
                                              const base::Logger& logger) const noexcept = 0;

 protected:
  ~CudaBackendModule() = default;
};

// This build's id: "<version>-<git revision>/<layout tag>", the tag being the sizes of the
// types that cross the boundary (a changed struct changes it even without a commit).
std::string CudaModuleBuildId();

}  // namespace kvserve::engine
