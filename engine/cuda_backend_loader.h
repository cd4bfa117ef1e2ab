// Loads the CUDA backend module (engine/cuda_backend_module.h) on demand. Plain dlopen, no CUDA
// types: the kvserve binary links this, never the CUDA backend itself.
//
// Where the module is looked for (CudaModuleSearchPaths), first hit wins:
//   <directory of the executable>/libkvserve_cuda_backend.so      build tree (build/bin/) and
//                                                                 the Docker image (bin/)
//   <directory of the executable>/../lib/libkvserve_cuda_backend.so   an install (prefix/lib)
// Absolute paths derived from the running binary, like $ORIGIN in an RPATH: the module is
// found wherever the binary is copied with it, whatever the working directory or
// LD_LIBRARY_PATH. Its own dependencies (libcublas, libcudart) resolve through its RUNPATH and
// the system's library path, as the binary's did when it linked them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace kvserve::engine {

struct LoadedCudaModule {
  std::string path;            // the file that was loaded
  CudaBackendFactory factory;  // calls into the module; valid for the process's lifetime
};

std::vector<std::string> CudaModuleSearchPaths(const std::string& executable_path);

// dlopens the first of `paths` that exists (RTLD_NOW: every symbol resolved now, so a missing
// cuBLAS is an error here, not a crash later), checks its build id against this binary's and
// returns its factory. FailedPrecondition naming the paths tried, the dlopen error or the two
// build ids otherwise. A loaded module is never unloaded (see cuda_backend_module.h).
absl::StatusOr<LoadedCudaModule> LoadCudaBackendModule(const std::vector<std::string>& paths);

}  // namespace kvserve::engine
