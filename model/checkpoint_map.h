// Which Hugging Face checkpoint tensors make up each weight the forward pass reads, for
// every supported architecture: the one place that knows tensor names. The CPU loader
// (llama_weights.cc) and the device uploader (cuda/) both read through it, so a new
// architecture's naming is written once.
//
//   WeightSpec  = tensors stacked along dim 0 into one [rows][cols] matrix (or a [rows]
//                 vector, cols = 1), e.g. qkv = q_proj | k_proj | v_proj, or Phi-3's fused
//                 qkv_proj alone: the stacked result is the same matrix.
//
// Reading (tensor_reader.h) checks every tensor's shape against the spec, so a checkpoint
// whose tensors do not fit its config.json is refused naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvserve::model {

struct WeightSpec {
  std::vector<std::string> names;  // stacked in this order; empty: the model has no such weight
  std::vector<int64_t> row_counts; // rows each tensor contributes (same length as names)
  int64_t cols = 1;                // 1 for vectors
  bool is_norm = false;            // a norm's scale vector (Gemma's (1 + w) applies to these)
  bool present() const { return !names.empty(); }
  int64_t rows() const;
  int64_t elements() const { return rows() * cols; }
};

struct LayerWeightSpecs {
  WeightSpec input_norm;  // [D]
  WeightSpec qkv;         // [(H + 2 Hkv) hd][D]
  WeightSpec qkv_bias;    // [(H + 2 Hkv) hd] or absent
  WeightSpec q_norm;      // [hd] per-head RMSNorm of queries before RoPE (Qwen3, Gemma 3) or absent
  WeightSpec k_norm;      // [hd] likewise for keys
  WeightSpec o;           // [D][H hd]
  WeightSpec o_bias;      // [D] or absent
  WeightSpec post_attn_norm;  // [D] Gemma: norm of the attention output before the residual add
  WeightSpec pre_ff_norm;     // [D] the norm feeding the MLP (Llama's post_attention_layernorm)
  WeightSpec post_ff_norm;    // [D] Gemma: norm of the MLP output before the residual add
  WeightSpec gate_up;     // [2 I][D] rows: gate | up
  WeightSpec down;        // [D][I]
};

struct CheckpointMap {
  WeightSpec embed;       // [V][D]
  WeightSpec final_norm;  // [D]
  WeightSpec lm_head;     // [V][D]; with tied embeddings the embedding tensor itself
  std::vector<LayerWeightSpecs> layers;
};

CheckpointMap MapCheckpoint(const ModelConfig& config);

}  // namespace kvserve::model
