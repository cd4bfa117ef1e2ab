#include "engine/engine_factory.h"

namespace kvserve::engine {

// Temporary until the engine loop lands (issue 5, in progress in this session): the serve
// command reports this error and exits 1 instead of pretending to serve.
absl::StatusOr<std::unique_ptr<ServingEngine>> CreateEngine(const config::Config&,
                                                            const std::string& model_dir,
                                                            EngineDeps) {
  return absl::UnimplementedError("the serving engine is not built yet; cannot serve " + model_dir);
}

}  // namespace kvserve::engine
