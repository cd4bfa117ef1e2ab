// LoadModelConfig (model_config.h): a model path's configuration, from config.json or, for a
// GGUF model, from the file's metadata. Kept apart from the parser so that the parser (and its
// fuzz target) links without the GGUF reader.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_source.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/hf_quant_checkpoint.h"
#include "model/load_model_config.h"
#include "model/model_config.h"

namespace kvserve::model {

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  if (gguf::IsGgufSource(model_dir)) {
    KVS_ASSIGN_OR_RETURN(gguf::GgufModel g, gguf::GgufModel::Open(model_dir));
    return LoadGgufModelConfig(g);
  }
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), path);
}

absl::StatusOr<ModelSource> OpenModelSource(const std::string& path) {
  ModelSource s;
  if (gguf::IsGgufSource(path)) {
    KVS_ASSIGN_OR_RETURN(gguf::GgufModel opened, gguf::GgufModel::Open(path));
    auto g = std::make_shared<const gguf::GgufModel>(std::move(opened));
    KVS_ASSIGN_OR_RETURN(s.config, LoadGgufModelConfig(*g));
    KVS_ASSIGN_OR_RETURN(s.checkpoint, OpenGgufCheckpoint(g, s.config));
    return s;
  }
  KVS_ASSIGN_OR_RETURN(s.config, LoadModelConfig(path));
  KVS_ASSIGN_OR_RETURN(s.checkpoint, SafetensorsCheckpoint::Open(path));
  // Hugging Face integer quantization: quantized modules become block tensors.
  if (s.config.hf_quant) {
    KVS_ASSIGN_OR_RETURN(s.checkpoint,
                         OpenHfQuantCheckpoint(std::move(s.checkpoint), *s.config.hf_quant));
  }
  return s;
}

}  // namespace kvserve::model
