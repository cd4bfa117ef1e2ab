#include "engine/cuda_backend_module.h"

#include "absl/strings/str_cat.h"
#include "cache/kv_layout.h"

#ifndef KVSERVE_BUILD_REVISION
#error "KVSERVE_BUILD_REVISION is set by engine/CMakeLists.txt"
#endif

namespace kvserve::engine {

std::string CudaModuleBuildId() {
  // The types whose layout both sides must agree on (every argument and result of
  // CudaBackendModule::MakeBackend, and what they hold by value).
  return absl::StrCat(KVSERVE_BUILD_REVISION, "/", sizeof(config::Config), ".", sizeof(config::CacheConfig), ".",
                      sizeof(Backend), ".", sizeof(model::LlamaModel), ".", sizeof(compression::PolicyContext), ".",
                      sizeof(base::Logger), ".", sizeof(cache::KvLayout), ".", sizeof(absl::Status), ".",
                      sizeof(absl::StatusOr<Backend>));
}

}  // namespace kvserve::engine
