// The architecture hyper-parameters of a Hugging Face decoder checkpoint (config.json) for
// the Llama family: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM. They share one
// forward pass and differ only in what config.json switches on:
//
//   architecture   q/k/v bias          o_proj bias        sliding window
//   Llama          attention_bias      attention_bias     -
//   Mistral        -                   -                  sliding_window (if set)
//   Qwen2          always              -                  sliding_window if use_sliding_window
//
// Parsing validates everything the forward pass relies on; an unknown architecture, rope
// type or activation is an error naming the field, never a silent approximation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

enum class Architecture { kLlama, kMistral, kQwen2 };
enum class RopeScalingKind { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;
  // llama3 only: frequencies with wavelength beyond original_max / low_freq_factor are
  // divided by `factor`, those below original_max / high_freq_factor are kept, and the
  // band between is interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // default: num_heads
  int head_dim = 0;      // default: hidden_size / num_heads
  int vocab_size = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> sliding_window;  // set only when the model really uses one
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q_proj / k_proj / v_proj carry biases
  bool o_bias = false;    // o_proj carries a bias
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  // Longest context computed exactly: attention here is always full, so a sliding-window
  // model is exact only up to its window.
  int64_t max_context() const {
    return sliding_window ? std::min(max_position_embeddings, *sliding_window)
                          : max_position_embeddings;
  }
  // Parameters (weights + biases) the forward pass loads.
  int64_t num_parameters() const;
};

// Parses config.json text; `origin` (usually the file path) prefixes every error.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view origin);
// Reads and parses <model_dir>/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// RoPE inverse frequencies after scaling: inv_freq[f] for f in [0, head_dim / 2), the exact
// table the forward pass rotates with (TriAttention's frequency analysis reuses it).
std::vector<float> RopeInvFreq(const ModelConfig& config);

std::string_view ArchitectureName(Architecture a);

}  // namespace kvserve::model
