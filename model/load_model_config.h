// A model path opened as configuration + checkpoint: a Hugging Face directory (config.json,
// safetensors) or a GGUF model (gguf/gguf_source.h), the one place that tells them apart.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace kvserve::model {

struct ModelSource {
  ModelConfig config;
  SafetensorsCheckpoint checkpoint;
};
absl::StatusOr<ModelSource> OpenModelSource(const std::string& path);

}  // namespace kvserve::model
