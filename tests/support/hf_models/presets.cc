#include "tests/support/hf_models/presets.h"

#include <algorithm>
#include <cmath>

namespace kvserve::testing::hf {
namespace {

// Tied heads score a token's own embedding at hidden × std² against √hidden × std for the
// rest: a small std keeps the next-token distribution from collapsing onto the input.
constexpr double kTiedEmbedStd = 0.05;

}  // namespace

FixtureSpec LlamaPreset() {
  FixtureSpec s;
  s.arch = Arch::kLlama;
  s.rms_norm_eps = 1e-5;
  s.rope_theta = 10000.0;
  return s;
}

FixtureSpec Qwen2Preset() {
  FixtureSpec s;
  s.arch = Arch::kQwen2;
  s.rope_theta = 1000000.0;
  s.max_position_embeddings = 32768;
  // Qwen2.5 configs declare a window but switch it off.
  s.sliding_window = 32768;
  s.use_sliding_window = false;
  s.max_window_layers = 2;
  s.seed = 2;
  return s;
}

FixtureSpec Qwen3Preset() {
  FixtureSpec s;
  s.arch = Arch::kQwen3;
  s.head_dim = 32;  // 4 × 32 = 128 ≠ hidden 64, as in Qwen3-4B
  s.rope_theta = 1000000.0;
  s.max_position_embeddings = 40960;
  s.tie_word_embeddings = true;
  s.embed_std = kTiedEmbedStd;
  s.seed = 3;
  return s;
}

FixtureSpec MistralPreset(int sliding_window) {
  FixtureSpec s;
  s.arch = Arch::kMistral;
  s.rope_theta = 1000000.0;
  s.max_position_embeddings = 32768;
  s.rms_norm_eps = 1e-5;
  if (sliding_window > 0) s.sliding_window = sliding_window;
  s.seed = 4;
  return s;
}

FixtureSpec Gemma2Preset() {
  FixtureSpec s;
  s.arch = Arch::kGemma2;
  s.num_hidden_layers = 4;
  s.head_dim = 32;  // Gemma's head_dim is its own field (256 in 2B while hidden 2304 / 8 = 288)
  s.query_pre_attn_scalar = 24.0;  // deliberately neither head_dim nor hidden / heads
  s.attn_logit_softcapping = 50.0;
  s.final_logit_softcapping = 30.0;
  s.sliding_window = 8;
  s.max_position_embeddings = 8192;
  s.tie_word_embeddings = true;
  s.embed_std = kTiedEmbedStd;
  s.seed = 5;
  return s;
}

FixtureSpec Gemma3Preset() {
  FixtureSpec s;
  s.arch = Arch::kGemma3;
  s.num_hidden_layers = 6;
  s.head_dim = 32;
  s.query_pre_attn_scalar = 32.0;
  s.sliding_window = 8;
  s.sliding_window_pattern = 6;
  s.rope_theta = 1000000.0;
  s.rope_local_base_freq = 10000.0;
  s.rope_scaling = LinearRope(8.0);  // 4B+ configs: global layers only
  s.max_position_embeddings = 131072;
  s.tie_word_embeddings = true;
  s.embed_std = kTiedEmbedStd;
  s.seed = 6;
  return s;
}

FixtureSpec Phi3Preset() {
  FixtureSpec s;
  s.arch = Arch::kPhi3;
  s.rms_norm_eps = 1e-5;
  // A 128k-style config at toy scale: L0 16, extended 512 (factor 32 as in Phi-3-128k).
  s.original_max_position_embeddings = 16;
  s.max_position_embeddings = 512;
  s.rope_scaling = LongRope(RotaryDim(s));
  s.seed = 7;
  return s;
}

FixtureSpec Phi4MiniPreset() {
  FixtureSpec s = Phi3Preset();
  s.partial_rotary_factor = 0.75;  // rotary 12 of 16 dims
  s.rope_scaling = LongRope(RotaryDim(s));
  s.tie_word_embeddings = true;
  s.embed_std = kTiedEmbedStd;
  s.seed = 8;
  return s;
}

FixtureSpec MixtralPreset() {
  FixtureSpec s;
  s.arch = Arch::kMixtral;
  s.num_experts = 4;
  s.num_experts_per_tok = 2;
  s.rope_theta = 1000000.0;
  s.rms_norm_eps = 1e-5;
  s.max_position_embeddings = 32768;
  s.seed = 9;
  return s;
}

FixtureSpec Qwen3MoePreset() {
  FixtureSpec s;
  s.arch = Arch::kQwen3Moe;
  s.num_hidden_layers = 3;
  s.head_dim = 32;
  s.num_experts = 4;
  s.num_experts_per_tok = 2;
  s.moe_intermediate_size = 48;
  s.intermediate_size = 96;  // the dense layer's MLP
  s.norm_topk_prob = true;
  s.mlp_only_layers = {1};
  s.rope_theta = 1000000.0;
  s.max_position_embeddings = 40960;
  s.seed = 10;
  return s;
}

FixtureSpec GptOssPreset() {
  FixtureSpec s;
  s.arch = Arch::kGptOss;
  s.num_hidden_layers = 2;
  s.intermediate_size = 64;  // multiple of 32 for MXFP4 blocks along the input dim
  s.num_experts = 4;
  s.num_experts_per_tok = 2;
  s.attention_bias = true;
  s.sliding_window = 8;
  s.rms_norm_eps = 1e-5;
  s.rope_theta = 150000.0;
  // gpt-oss: YaRN factor 32 over L0 4096 with truncate false; toy L0 16.
  s.rope_scaling = YarnRope(32.0, 16);
  s.rope_scaling.beta_fast = 32.0;
  s.rope_scaling.beta_slow = 1.0;
  s.rope_scaling.truncate = false;
  s.max_position_embeddings = 512;
  s.seed = 11;
  return s;
}

RopeScalingSpec LinearRope(double factor) {
  RopeScalingSpec r;
  r.type = "linear";
  r.factor = factor;
  return r;
}

RopeScalingSpec DynamicRope(double factor) {
  RopeScalingSpec r;
  r.type = "dynamic";
  r.factor = factor;
  return r;
}

RopeScalingSpec Llama3Rope(double factor, int64_t original_max, double low_freq_factor,
                           double high_freq_factor) {
  RopeScalingSpec r;
  r.type = "llama3";
  r.factor = factor;
  r.original_max_position_embeddings = original_max;
  r.low_freq_factor = low_freq_factor;
  r.high_freq_factor = high_freq_factor;
  return r;
}

RopeScalingSpec YarnRope(double factor, int64_t original_max) {
  RopeScalingSpec r;
  r.type = "yarn";
  r.factor = factor;
  r.original_max_position_embeddings = original_max;
  return r;
}

RopeScalingSpec LongRope(int rotary_dim) {
  RopeScalingSpec r;
  r.type = "longrope";
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const double t = static_cast<double>(i) / std::max(1, rotary_dim / 2 - 1);
    r.short_factor.push_back(1.0 + 0.05 * t);
    r.long_factor.push_back(1.0 + 7.0 * t * t);
  }
  return r;
}

}  // namespace kvserve::testing::hf
