#include "engine/cuda_backend_loader.h"

#include <dlfcn.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/cuda_backend_module.h"

namespace kvserve::engine {

std::vector<std::string> CudaModuleSearchPaths(const std::string& executable_path) {
  const std::filesystem::path dir = std::filesystem::path(executable_path).parent_path();
  return {(dir / kCudaModuleFileName).string(), (dir / ".." / "lib" / kCudaModuleFileName).lexically_normal().string()};
}

absl::StatusOr<LoadedCudaModule> LoadCudaBackendModule(const std::vector<std::string>& paths) {
  std::string path;
  std::error_code ec;
  for (const std::string& p : paths) {
    if (std::filesystem::is_regular_file(p, ec)) {
      path = p;
      break;
    }
  }
  if (path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA backend module ", kCudaModuleFileName, " is not installed (looked for ",
                     absl::StrJoin(paths, ", "), "); the build puts it next to the kvserve binary: ship it along"));
  }
  // Cleared first: dlerror() reports the last error of any dl call in the process.
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend module ", path, ": ", e != nullptr ? e : "unknown dlopen error"));
  }
  // From here on the handle is deliberately never closed, also on the error paths below: a
  // module's static destructors would otherwise run while the process may still hold its
  // objects (and dlclose of CUDA libraries is not reliably clean).
  using BuildIdFn = const char* (*)();
  using EntryFn = const CudaBackendModule* (*)();
  auto build_id_fn = reinterpret_cast<BuildIdFn>(dlsym(handle, kCudaModuleBuildIdSymbol));
  auto entry_fn = reinterpret_cast<EntryFn>(dlsym(handle, kCudaModuleEntrySymbol));
  if (build_id_fn == nullptr || entry_fn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a kvserve CUDA backend module (no ",
                                                      kCudaModuleBuildIdSymbol, " / ", kCudaModuleEntrySymbol, ")"));
  }
  const std::string theirs = build_id_fn();
  const std::string ours = CudaModuleBuildId();
  if (theirs != ours) {
    return absl::FailedPreconditionError(absl::StrCat("the CUDA backend module ", path,
                                                      " comes from another build (module ", theirs, ", kvserve ",
                                                      ours, "); install the module built with this binary"));
  }
  const CudaBackendModule* module = entry_fn();
  if (module == nullptr) return absl::InternalError(absl::StrCat(path, ": the module returned no entry point"));
  LoadedCudaModule loaded;
  loaded.path = path;
  loaded.factory = [module](const config::Config& config, const model::LlamaModel& model,
                            const compression::PolicyContext* compression, const base::Logger& logger) {
    return module->MakeBackend(config, model, compression, logger);
  };
  return loaded;
}

}  // namespace kvserve::engine
