// A GGUF file's model configuration, read from its metadata under llama.cpp's architecture
// names and translated into the Hugging Face config.json that the same model ships with, so
// that one parser (model_config.h) validates every model source:
//
//   general.architecture   Hugging Face architecture     notes
//   llama                  LlamaForCausalLM              Mistral converts to llama too;
//                          MixtralForCausalLM            ... with {arch}.expert_count > 0
//   qwen2                  Qwen2ForCausalLM
//   qwen3                  Qwen3ForCausalLM
//   qwen3moe               Qwen3MoeForCausalLM
//   phi3                   Phi3ForCausalLM               longrope from rope_factors_{long,short}
//   gemma2 / gemma3        Gemma2/Gemma3ForCausalLM      norms stored as (1 + w)
//
// What the converter moved out of the metadata is read back from tensors: the vocabulary
// size from token_embd's rows, tied embeddings from a missing output.weight, and Llama 3's
// frequency-dependent RoPE divisors from rope_freqs (expressed as per-frequency divisors
// with no attention factor, which is exactly how llama.cpp applies them). Anything else we
// cannot express is refused naming the key: never approximated.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace kvserve::model {

// The llama.cpp architecture names we serve, for messages ("llama, qwen2, ...").
std::string GgufArchitectures();

// The equivalent config.json text (exposed for tests and `kvserve` diagnostics).
absl::StatusOr<std::string> GgufConfigJson(const gguf::GgufModel& gguf);

// GgufConfigJson parsed by ParseModelConfig; errors name the GGUF file.
absl::StatusOr<ModelConfig> LoadGgufModelConfig(const gguf::GgufModel& gguf);

}  // namespace kvserve::model
