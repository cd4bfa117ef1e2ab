// The mixture-of-experts feed-forward of one layer on the CPU (Mixtral, Qwen3-MoE, gpt-oss;
// MoeConfig in model_config.h says which variant):
//
//   z      = h · routerᵀ (+ b)                                   [T][E]
//   route  : per token, top_k experts and weights (RouteTokens)  [T][k]
//   group  : the T·k (token, slot) pairs sorted by expert, tokens ascending within each
//   per expert e with n_e rows (one packed GEMM each, only for experts someone chose):
//            gu = h[rows of e] · gate_upₑᵀ (+ b)                 [n_e][2 Ie]
//   act    = SiluMul(gu) or ClampedSwiglu(gu) over all T·k rows  [T·k][Ie]
//   per expert e:  y = act[rows of e] · downₑᵀ (+ b)              [n_e][D]
//   x[t]  += Σ_j weight[t][j] · y[slot (t, j)]                    j in routing order
//
// Batch invariance (a sequence's greedy output alone equals its output in any batch): every
// row of a packed GEMM is one fixed chain of multiply-adds whatever the number of rows
// (kernels/cpu/packed_linear.h), the router and activation are per row, and a token's
// weighted sum runs over its own slots in routing order; so a token's result is bit-for-bit
// the same whichever other tokens share its experts in the step.
//
// Scratch is sized at construction for max_tokens rows (x top_k for the expert rows); Forward
// never allocates. Not thread-safe: one model's engine thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/lora_sgmv.h"
#include "model/forward_batch.h"
#include "model/llama_weights.h"
#include "model/model_config.h"

namespace kvserve::model {

// Routes `rows` tokens from their router logits [rows][E]: experts[r][j] and weights[r][j]
// ([rows][top_k]) in order of decreasing score, ties to the lower expert index (PyTorch's
// topk on the values Hugging Face ranks: softmax probabilities for kSoftmaxTopK, logits for
// kTopKSoftmax). fp32 throughout. kSoftmaxTopK overwrites `logits` with the probabilities.
void RouteTokens(const MoeConfig& moe, float* logits, int64_t rows, int32_t* experts,
                 float* weights);

// Counting sort of the rows * top_k (token, slot) pairs of `chosen` ([rows][top_k] expert ids)
// by expert, tokens ascending within one: expert e's grouped rows are [offsets[e],
// offsets[e + 1]); slot_row[t * top_k + j] is the grouped row of token t's j-th slot and
// row_token[r] the token of grouped row r. offsets: [num_experts + 1], fill: [num_experts]
// scratch, slot_row and row_token: [rows * top_k]. Shared by the CPU and CUDA MoE layers so
// both group (and so sum) identically.
void GroupByExpert(const int32_t* chosen, int64_t rows, int top_k, int num_experts, int32_t* offsets,
                   int32_t* fill, int32_t* slot_row, int32_t* row_token);

class MoeLayer {
 public:
  MoeLayer(const ModelConfig& config, int max_tokens);

  // x[r][0, D) += the layer's expert mixture of h[r] for r in [0, rows), rows <= max_tokens.
  // h: the feed-forward input (already normed), [rows][D] dense. `lora` (forward_batch.h):
  // each expert row also gets its token's adapter delta on that expert's gate_up and down,
  // grouped by (expert, slot) so one grouped call covers every expert (`layer` picks the
  // layer's expert_views).
  void Forward(const MoeLayerWeights& w, const float* h, int64_t rows, float* x,
               const LoraRows* lora = nullptr, int layer = 0);

  // The routing of the last Forward, [rows][top_k] each (tests, observability).
  std::span<const int32_t> chosen_experts(int64_t rows) const {
    return {chosen_.data(), static_cast<size_t>(rows * top_k_)};
  }
  std::span<const float> routing_weights(int64_t rows) const {
    return {weights_.data(), static_cast<size_t>(rows * top_k_)};
  }
  size_t scratch_bytes() const;

 private:
  MoeConfig moe_;
  int hidden_;
  int top_k_;
  int max_tokens_;
  // [max_tokens][E] logits; [max_tokens][k] routing; [E + 1] group offsets; [max_tokens·k]
  // slot -> grouped row and grouped row -> token.
  std::vector<float> logits_, weights_;
  std::vector<int32_t> chosen_, offsets_, fill_, slot_row_, row_token_;
  // Grouped rows, [max_tokens·k][...]: gathered inputs, gate|up, activation, expert outputs.
  std::vector<float> xg_, gate_up_, act_, yg_;
  // LoRA on experts: each grouped row's (expert, slot) bucket, its groups and the shrink
  // scratch. Sized on the first step with adapters, never again after that.
  std::vector<int16_t> lora_buckets_;
  kernels::cpu::LoraRowGroups lora_groups_;
  std::vector<float> lora_scratch_;
  // Adds the expert deltas of `m` (0: gate_up, 1: down) to y for every grouped row.
  void AddExpertLora(const LoraRows& lora, int layer, int m, const float* x, int in, float* y,
                     int out);
};

}  // namespace kvserve::model
