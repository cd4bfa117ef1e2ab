// The reference forward's reading of a Hugging Face config.json: everything the float64
// forward (reference_forward.h) needs, resolved per layer (window, RoPE parameters, dense or
// sparse feed-forward). Strict on purpose: a field this reader does not know for the
// architecture, an unknown architecture, rope type or activation is an InvalidArgument
// naming it, so a fixture can never exercise a switch the oracle silently ignores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/hf_models/fixture_spec.h"

namespace kvserve::testing::hf {

// RoPE of one layer type: the config's rope_scaling resolved against its defaults.
struct RopeParams {
  std::string type = "default";  // default, linear, dynamic, llama3, yarn, longrope
  double theta = 10000.0;
  int rotary_dim = 0;  // head_dim × partial_rotary_factor, truncated
  int64_t max_position_embeddings = 0;
  double factor = 1.0;
  int64_t original_max = 0;  // llama3 / yarn / longrope L0
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  std::vector<double> short_factor, long_factor;
};

struct LayerConfig {
  bool sliding = false;  // window applies
  int64_t window = 0;
  bool sparse_moe = false;  // MoE block instead of the dense MLP
  RopeParams rope;
};

struct ReferenceConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as written
  int hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0;
  int head_dim = 0, vocab_size = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;       // Qwen3 / Qwen3-MoE (w) and Gemma 3 ((1 + w))
  bool gemma = false;         // (1 + w) norms, four norms per block, scaled embedding
  double embed_scale = 1.0;   // Gemma: sqrt(hidden) rounded to the checkpoint dtype
  double attn_scaling = 0.0;  // head_dim^-0.5, Gemma query_pre_attn_scalar^-0.5
  std::optional<double> attn_softcap, final_softcap;
  bool sinks = false;               // gpt-oss
  std::string activation = "silu";  // or gelu_pytorch_tanh
  // MoE.
  int num_experts = 0, top_k = 0, moe_intermediate_size = 0;
  bool norm_topk_prob = true;  // Mixtral always renormalises
  double swiglu_limit = 7.0;
  bool mxfp4 = false;  // gpt-oss experts stored as *_blocks / *_scales
  std::string torch_dtype = "float32";
  std::vector<LayerConfig> layers;
};

absl::StatusOr<ReferenceConfig> ParseReferenceConfig(std::string_view json_text);
absl::StatusOr<ReferenceConfig> LoadReferenceConfig(const std::string& dir);

}  // namespace kvserve::testing::hf
