// The float64 oracle: the logits a Hugging Face checkpoint directory (config.json +
// safetensors) defines for a token sequence, computed as a plain loop in double precision,
// full causal attention with no KV cache (each call is one forward from position 0, which
// is also what fixes dynamic NTK's base and longrope's short/long choice: both depend on
// the forward's length).
//
// Which published definition each piece follows (HF transformers modeling files, read for
// their math and written here independently):
//   embedding     x = E[id]; Gemma 2/3 × sqrt(hidden) rounded to the checkpoint dtype
//                 (Gemma2Model.forward `normalizer`, Gemma3TextScaledWordEmbedding)
//   RMSNorm       x / sqrt(mean(x²) + eps) × w; Gemma × (1 + w)
//   attention     q/k/v projections (+bias: Qwen2 q/k/v; Llama/Qwen3/gpt-oss attention_bias
//                 q/k/v/o); Phi-3 fused qkv_proj rows [Q | K | V]; Qwen3 / Qwen3-MoE
//                 q_norm/k_norm (w) and Gemma 3 ((1 + w)) per head before RoPE; RoPE on the
//                 first rotary_dim dims, halves paired (i, i + rotary_dim/2), cos/sin ×
//                 attention_factor (reference_rope.h); GQA head h reads KV head
//                 h / (heads / kv_heads); scores × head_dim^-0.5 (Gemma:
//                 query_pre_attn_scalar^-0.5); Gemma 2 cap·tanh(s/cap); key j visible from
//                 query i iff j <= i and, on sliding layers, i − j < window (masking_utils:
//                 window W keeps W keys including the query's own); gpt-oss sinks: one
//                 extra logit per head in the softmax denominator, no value
//   block         x += attn(norm(x)); x += mlp(norm(x)); Gemma: x += post_attn_norm(attn(
//                 input_norm(x))); x += post_ff_norm(mlp(pre_ff_norm(x)))
//   MLP           down(act(gate x) · up x), act silu or gelu_pytorch_tanh (Gemma);
//                 Phi-3 fused gate_up_proj rows [gate | up]
//   MoE           Mixtral: softmax over all experts, top-k, renormalised; Qwen3-MoE: same,
//                 renormalised iff norm_topk_prob, dense MLP on mlp_only_layers and layers
//                 with (i + 1) % decoder_sparse_step != 0; gpt-oss: router logits + bias,
//                 top-k of logits, softmax over the k, experts x·W + b with interleaved
//                 columns (even = gate, odd = up), gate = min(gate, limit), up =
//                 clamp(up, ±limit), out = ((up + 1) · gate · σ(1.702 gate))·W2 + b2.
//                 Ties in top-k go to the lower expert index.
//   logits        norm(x) · lm_headᵀ (tied: embed_tokens); Gemma 2 final cap·tanh(z/cap)
// Weights are the stored values (BF16 widened exactly, MXFP4 dequantised exactly); the
// reference never emulates bf16 arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/hf_models/reference_config.h"

namespace kvserve::testing::hf {

struct Reference {
  int vocab_size = 0;
  std::vector<double> logits;  // [ids.size()][vocab_size]

  std::span<const double> Row(size_t t) const {
    return {logits.data() + t * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size)};
  }
  std::vector<double> LogProbs(size_t t) const;  // log_softmax of Row(t)
  int32_t Argmax(size_t t) const;                // ties: lowest id
};

// A loaded checkpoint (config + every tensor widened to double), reusable across forwards.
class ReferenceModel {
 public:
  static absl::StatusOr<std::unique_ptr<ReferenceModel>> Load(const std::string& dir);
  ~ReferenceModel();
  const ReferenceConfig& config() const;
  // Logits at every position; ids must be in [0, vocab) and non-empty.
  absl::StatusOr<Reference> Forward(std::span<const int32_t> ids) const;
  // The feed-forward output of mixture-of-experts layer `layer` for one already-normed input
  // row h [hidden] (the "MoE" line above; without the residual): unit tests of an engine's
  // expert layer on its own.
  absl::StatusOr<std::vector<double>> MoeBlock(int layer, std::span<const double> h) const;

  struct Weights;

 private:
  explicit ReferenceModel(std::unique_ptr<Weights> w);
  std::unique_ptr<Weights> w_;
};

absl::StatusOr<Reference> RunReference(const std::string& dir, std::span<const int32_t> ids);
// Greedy continuation: `n` tokens, each the argmax of a from-scratch forward over the prompt
// plus the tokens chosen so far.
absl::StatusOr<std::vector<int32_t>> Greedy(const std::string& dir, std::span<const int32_t> prompt,
                                            int n);

}  // namespace kvserve::testing::hf
