// The architecture hyper-parameters of a Hugging Face decoder checkpoint (config.json).
// Every supported architecture runs one forward pass (llama_model.h) and differs only in
// what config.json switches on (docs/models.md has the full table):
//
//   architecture   q/k/v bias       q/k norm   norms            MLP           windows
//   Llama          attention_bias   -          RMS              SwiGLU        -
//   Mistral        -                -          RMS              SwiGLU        sliding_window: all
//   layers Qwen2          always           -          RMS              SwiGLU use_sliding_window:
//   layers >= max_window_layers Qwen3          attention_bias   yes        RMS              SwiGLU
//   as Qwen2 Phi3           - (fused qkv)    -          RMS              SwiGLU sliding_window: all
//   layers Gemma2         attention_bias   -          (1+w), sandwich  GeGLU         even layers
//   (layer_types) Gemma3         attention_bias   (1+w)      (1+w), sandwich  GeGLU         5 of 6
//   (layer_types / pattern) Mixtral        -                -          RMS              MoE SwiGLU
//   sliding_window: all layers Qwen3MoE       attention_bias   yes        RMS              MoE
//   SwiGLU    as Qwen2 (dense MLP on mlp_only_layers) GptOss         always (+sinks)  - RMS MoE
//   clamped   even layers (layer_types)
//
// Mixture of experts (MoeConfig, model/moe_layer.h): a router picks top_k of num_experts
// expert MLPs per token. The three families differ only in routing order (softmax then
// top-k, or top-k then softmax), renormalisation, biases and the expert activation.
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
#include "model/hf_quant_config.h"

namespace kvserve::model {

enum class Architecture {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kPhi3,
  kGemma2,
  kGemma3,
  kMixtral,
  kQwen3Moe,
  kGptOss,
};
enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn, kDynamic, kLongRope };
enum class Activation { kSilu, kGeluTanh };  // the MLP's gate activation

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;
  // llama3 only: frequencies with wavelength beyond original_max / low_freq_factor are
  // divided by `factor`, those below original_max / high_freq_factor are kept, and the
  // band between is interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3, yarn, dynamic, longrope: the context the model was pre-trained for.
  int64_t original_max_position_embeddings = 8192;
  // yarn (rope_table.h has the formulas).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn and longrope: given, or derived
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  // longrope: per-frequency divisors, [rotary_dim / 2] each.
  std::vector<double> short_factor;
  std::vector<double> long_factor;
};

// How a token's router logits z[num_experts] become the weights of its top_k experts.
enum class MoeRouting {
  // Mixtral, Qwen3-MoE: p = softmax(z) over all experts; keep the top_k p (ties to the
  // lower index); divided by their sum iff MoeConfig::renormalize.
  kSoftmaxTopK,
  // gpt-oss: the top_k z (ties to the lower index), weights softmax over those k only.
  kTopKSoftmax,
};

enum class ExpertActivation {
  kSwiglu,  // silu(gate) * up
  // gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) * g * sigmoid(alpha g)
  kClampedSwiglu,
};

struct MoeConfig {
  int num_experts = 0;        // 0: a dense model
  int top_k = 0;              // experts per token (num_experts_per_tok)
  int intermediate_size = 0;  // per expert (Qwen3-MoE moe_intermediate_size)
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  bool renormalize = true;   // kSoftmaxTopK only (Qwen3-MoE norm_topk_prob; Mixtral always)
  bool router_bias = false;  // gpt-oss mlp.router.bias
  bool expert_bias = false;  // gpt-oss gate_up_proj_bias / down_proj_bias
  ExpertActivation activation = ExpertActivation::kSwiglu;
  double swiglu_limit = 0.0;  // kClampedSwiglu
  double swiglu_alpha = 1.702;
  // gpt-oss: the release stores experts as MXFP4 (quantization_config.quant_method "mxfp4");
  // they are unpacked at load into bf16, which holds every finite MXFP4 value exactly.
  bool mxfp4 = false;
  // gpt-oss from a GGUF file: each expert's gate, up and down (and their biases) are separate
  // tensors, as llama.cpp's converter splits Hugging Face's fused, interleaved gate_up_proj
  // (checkpoint_map.cc maps them like Qwen3-MoE's). Set by the GGUF config translation only.
  bool split_experts = false;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  // Hugging Face integer quantization (AWQ / GPTQ / compressed-tensors int): the checkpoint's
  // projections are read by model/hf_quant_checkpoint.h. nullopt: not quantized this way.
  std::optional<HfQuantConfig> hf_quant;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // default: num_heads
  int head_dim = 0;      // default: hidden_size / num_heads
  int rotary_dim = 0;    // dims of each head RoPE rotates: head_dim * partial_rotary_factor
  int vocab_size = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Gemma 3: the base of its sliding-window layers, which rotate without rope_scaling.
  std::optional<double> rope_local_theta;
  int64_t max_position_embeddings = 2048;
  // The longest sequence served, which fixes dynamic and longrope frequencies (rope_table.h):
  // max_position_embeddings (times the dynamic factor) unless the server caps it lower.
  int64_t served_context = 0;
  std::optional<int64_t> sliding_window;  // set only when the model really uses one
  // [num_layers]: the window of each layer's attention, 0 for full attention.
  std::vector<int32_t> layer_window;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q_proj / k_proj / v_proj carry biases
  bool o_bias = false;    // o_proj carries a bias
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  // Gemma: post_attention_layernorm normalises the attention output before the residual
  // add, and pre_/post_feedforward_layernorm wrap the MLP.
  bool sandwich_norms = false;
  // Gemma: RMSNorm multiplies by (1 + weight); the loader adds the 1 once, in fp32, as
  // Hugging Face's Gemma RMSNorm does on every call.
  bool norm_weight_offset = false;
  Activation activation = Activation::kSilu;
  // Gemma: the embedding is multiplied by sqrt(hidden_size), rounded to the checkpoint's
  // dtype as Hugging Face's normalizer is. 0: no scaling.
  bool scale_embedding = false;
  // Queries are scaled by attention_scale before the softmax: head_dim^-0.5, or Gemma's
  // query_pre_attn_scalar^-0.5.
  double attention_scale = 0.0;
  double attn_logit_softcap = 0.0;   // Gemma 2: scores = cap tanh(scores / cap); 0: none
  double final_logit_softcap = 0.0;  // Gemma 2: logits = cap tanh(logits / cap); 0: none
  // gpt-oss: one learned logit per query head (self_attn.sinks) joins each softmax's
  // denominator without a value.
  bool attention_sinks = false;
  MoeConfig moe;
  // [num_layers]: 1 where the layer's feed-forward is the mixture of experts, 0 where it is
  // the dense MLP (all 0 for a dense model; Qwen3-MoE mlp_only_layers / decoder_sparse_step).
  std::vector<uint8_t> layer_moe;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  bool any_sliding_layer() const {
    return std::any_of(layer_window.begin(), layer_window.end(), [](int32_t w) { return w > 0; });
  }
  // Some layer's window is shorter than the served context (else every layer attends the
  // whole context, and the model runs as full attention).
  bool window_binds() const {
    return std::any_of(layer_window.begin(), layer_window.end(),
                       [&](int32_t w) { return w > 0 && w < max_context(); });
  }
  // The widest window when every layer is windowed (the KV a sequence needs stops growing
  // there); 0 when some layer attends the whole context.
  int32_t kv_window() const {
    int32_t w = 0;
    for (int32_t lw : layer_window) {
      if (lw == 0) return 0;
      w = std::max(w, lw);
    }
    return w;
  }
  // Longest context served (sliding-window layers mask their window exactly at any length).
  int64_t max_context() const {
    return served_context > 0 ? served_context : max_position_embeddings;
  }
  // (A config built by hand may leave layer_moe empty: every layer is then dense.)
  bool is_moe_layer(int layer) const {
    return static_cast<size_t>(layer) < layer_moe.size() &&
           layer_moe[static_cast<size_t>(layer)] != 0;
  }
  bool any_moe_layer() const {
    return std::any_of(layer_moe.begin(), layer_moe.end(), [](uint8_t m) { return m != 0; });
  }
  bool any_dense_layer() const {
    for (int i = 0; i < num_layers; ++i) {
      if (!is_moe_layer(i)) return true;
    }
    return false;
  }
  // Parameters (weights + biases) the forward pass loads: every expert counted.
  int64_t num_parameters() const;
  // Parameters one token runs through: num_parameters() with top_k of each MoE layer's
  // experts instead of all of them (the router counts in full). Equal for a dense model.
  int64_t num_active_parameters() const;
};

// Parses config.json text; `origin` (usually the file path) prefixes every error.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view origin);
// Reads and parses <model_dir>/config.json; a GGUF model path (gguf/gguf_source.h) is read
// through its metadata instead (gguf_config.h).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// RoPE inverse frequencies after scaling: inv_freq[f] for f in [0, rotary_dim / 2), the
// exact table the forward pass's full-attention layers rotate with (TriAttention's
// frequency analysis reuses it); rope_table.h has the general form.
std::vector<float> RopeInvFreq(const ModelConfig& config);

std::string_view ArchitectureName(Architecture a);

}  // namespace kvserve::model
