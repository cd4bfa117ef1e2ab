// What a random Hugging Face fixture checkpoint looks like: the architecture, its
// hyper-parameters (named after the config.json fields they become), the storage dtype,
// sharding and seed. WriteRandomCheckpoint (checkpoint_writer.h) turns a spec into a model
// directory; the presets (presets.h) give a small, well-conditioned spec per architecture.
//
// Fields that an architecture does not have are ignored by the writer for that architecture
// (e.g. query_pre_attn_scalar outside Gemma), so one struct serves every family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::testing::hf {

enum class Arch {
  kLlama,     // LlamaForCausalLM, model_type llama
  kQwen2,     // Qwen2ForCausalLM, qwen2
  kQwen3,     // Qwen3ForCausalLM, qwen3
  kMistral,   // MistralForCausalLM, mistral
  kGemma2,    // Gemma2ForCausalLM, gemma2
  kGemma3,    // Gemma3ForCausalLM, gemma3_text
  kPhi3,      // Phi3ForCausalLM, phi3
  kMixtral,   // MixtralForCausalLM, mixtral
  kQwen3Moe,  // Qwen3MoeForCausalLM, qwen3_moe
  kGptOss,    // GptOssForCausalLM, gpt_oss
};

enum class WeightDtype { kF32, kBf16 };

// gpt-oss experts: the bf16/f32 layout transformers saves after dequantising
// (mlp.experts.gate_up_proj [E, hidden, 2I], ...) or the original release's MXFP4
// (mlp.experts.gate_up_proj_blocks / _scales). Both hold the same values for one seed.
enum class ExpertFormat { kDequantised, kMxfp4 };

// config.json `rope_scaling`. type "" writes null (plain RoPE). Only the fields of the
// chosen type are written.
struct RopeScalingSpec {
  std::string type;  // "", "linear", "dynamic", "llama3", "yarn", "longrope"
  double factor = 1.0;
  // llama3, yarn (inside rope_scaling); longrope keeps it at the config's top level
  // (Phi-3), see FixtureSpec::original_max_position_embeddings.
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0;                   // llama3
  double high_freq_factor = 4.0;                  // llama3
  std::optional<double> beta_fast, beta_slow;     // yarn (HF defaults 32 / 1)
  std::optional<double> attention_factor;         // yarn, longrope: explicit override
  std::optional<double> mscale, mscale_all_dim;   // yarn (DeepSeek-style ratio)
  std::optional<bool> truncate;                   // yarn (gpt-oss writes false)
  std::vector<double> short_factor, long_factor;  // longrope, rotary_dim / 2 each
};

struct FixtureSpec {
  Arch arch = Arch::kLlama;
  int hidden_size = 64;
  int intermediate_size = 128;
  int num_hidden_layers = 2;
  int num_attention_heads = 4;
  int num_key_value_heads = 2;
  int head_dim = 16;  // written for the families whose config carries it
  int vocab_size = 256;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  RopeScalingSpec rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama: q/k/v/o biases; gpt-oss: always true in practice

  // Sliding window (Mistral, Qwen2/3 behind use_sliding_window, Phi-3, Gemma, gpt-oss).
  std::optional<int> sliding_window;
  bool use_sliding_window = false;  // Qwen2/3/Qwen3-MoE gate
  int max_window_layers = 0;        // Qwen2/3: layers >= this one slide
  // "sliding_attention" / "full_attention" per layer; empty: the family's default pattern
  // (Gemma 2 and gpt-oss: even layers slide; Gemma 3: every sliding_window_pattern-th is full).
  std::vector<std::string> layer_types;
  bool write_layer_types = true;   // Gemma/gpt-oss: also write the derived list
  int sliding_window_pattern = 6;  // Gemma 3

  // Gemma.
  double query_pre_attn_scalar = 16.0;
  std::optional<double> attn_logit_softcapping;   // Gemma 2: 50
  std::optional<double> final_logit_softcapping;  // Gemma 2: 30
  double rope_local_base_freq = 10000.0;          // Gemma 3 sliding layers

  // Phi-3.
  double partial_rotary_factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // top-level field (Phi-3 longrope)

  // MoE: Mixtral num_local_experts, Qwen3-MoE num_experts, gpt-oss num_local_experts.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;  // Qwen3-MoE experts (dense layers use intermediate_size)
  bool norm_topk_prob = true;     // Qwen3-MoE
  int decoder_sparse_step = 1;    // Qwen3-MoE
  std::vector<int> mlp_only_layers;
  double swiglu_limit = 7.0;  // gpt-oss
  ExpertFormat expert_format = ExpertFormat::kDequantised;

  // Storage and randomness.
  WeightDtype dtype = WeightDtype::kF32;
  int num_shards = 1;  // 1: model.safetensors; 2: model-0000{1,2}-of-00002 + index
  uint64_t seed = 1;
  double weight_std = 0.08;  // projection matrices; embeddings / norms / biases are fixed below
  double embed_std = 0.5;
  // gpt-oss expert weights are drawn as MXFP4 codes: this E8M0 exponent (2^(e-127)) sets
  // their scale; raise it to drive activations into the SwiGLU clamp.
  int mxfp4_scale_exponent = 121;
};

std::string ArchitectureName(Arch arch);  // "LlamaForCausalLM", ...
std::string ModelType(Arch arch);         // "llama", ...
bool IsGemma(Arch arch);
// Rotary dimensions the spec implies: head_dim × partial_rotary_factor (HF truncates).
int RotaryDim(const FixtureSpec& spec);
// Per-layer "sliding_attention" / "full_attention" as the writer will describe it (spec
// layer_types if given, else the family's default pattern, all full without a window).
std::vector<std::string> LayerTypes(const FixtureSpec& spec);

}  // namespace kvserve::testing::hf
