// Small, well-conditioned fixture specs per architecture (hidden 64, 2-6 layers, vocab 256,
// 4 query / 2 KV heads, head_dim 16): a reference forward over a few dozen tokens takes
// milliseconds. The values that matter for each family follow its published configs
// (which layers slide, which norms exist, biases), at toy sizes.
#pragma once

#include <vector>

#include "tests/support/hf_models/fixture_spec.h"

namespace kvserve::testing::hf {

FixtureSpec LlamaPreset();
FixtureSpec Qwen2Preset();  // q/k/v biases, tied embeddings off, use_sliding_window false
FixtureSpec Qwen3Preset();  // q_norm / k_norm, explicit head_dim 32 (≠ hidden / heads)
FixtureSpec MistralPreset(int sliding_window);  // window 0: sliding_window null
FixtureSpec Gemma2Preset();    // softcaps 50 / 30, window 8, even layers slide, tied
FixtureSpec Gemma3Preset();    // 6 layers (5 local : 1 global), window 8, q/k norm, tied
FixtureSpec Phi3Preset();      // fused qkv / gate_up, longrope (short/long), L0 16
FixtureSpec Phi4MiniPreset();  // Phi3 with partial_rotary_factor 0.75, tied
FixtureSpec MixtralPreset();   // 4 experts, top-2
FixtureSpec Qwen3MoePreset();  // 4 experts, top-2, layer 1 dense (mlp_only_layers)
FixtureSpec GptOssPreset();    // sinks, window 8 on even layers, 4 experts top-2, yarn

// RoPE scalings for any preset (set spec.rope_scaling to one of these).
RopeScalingSpec LinearRope(double factor);
RopeScalingSpec DynamicRope(double factor);
RopeScalingSpec Llama3Rope(double factor, int64_t original_max, double low_freq_factor = 1.0,
                           double high_freq_factor = 4.0);
RopeScalingSpec YarnRope(double factor, int64_t original_max);
// Deterministic, distinct factor lists of rotary_dim / 2 entries (short near 1, long larger).
RopeScalingSpec LongRope(int rotary_dim);

}  // namespace kvserve::testing::hf
