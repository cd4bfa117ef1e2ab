// Which Hugging Face checkpoint tensors make up each weight the forward pass reads, for
// every supported architecture: the one place that knows tensor names. The CPU loader
// (llama_weights.cc) and the device uploader (cuda/) both read through it, so a new
// architecture's naming is written once.
//
//   WeightSpec  = tensors stacked along dim 0 into one [rows][cols] matrix (or a [rows]
//                 vector, cols = 1), e.g. qkv = q_proj | k_proj | v_proj, or Phi-3's fused
//                 qkv_proj alone: the stacked result is the same matrix; or one expert's
//                 slice of a fused expert tensor (FusedLayout, gpt-oss).
//
// Reading (tensor_reader.h) checks every tensor's shape against the spec, so a checkpoint
// whose tensors do not fit its config.json is refused naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvserve::model {

// gpt-oss keeps all experts of a layer in one tensor per kind (transformers' GptOssExperts).
// A spec with a fused layout reads expert `expert`'s slice of names[0] and hands it out as
// the same row-major [rows][cols] matrix (or [rows] vector) as every other spec:
enum class FusedLayout {
  kNone,        // the names stacked along dim 0 (every other weight)
  kInputMajor,  // [E][cols][rows], stored for x · W: transposed on read
  kVectors,     // [E][rows]: one vector (a bias) per expert
  // MXFP4 (OCP microscaling, as the gpt-oss release stores experts): names[0] = <w>_blocks
  // u8 [E][rows][cols / 32][16] (two FP4 E2M1 codes a byte, low nibble first), scales_name =
  // <w>_scales u8 [E][rows][cols / 32] (E8M0: 2^(s - 127)). Unpacked to BF16 on read, which
  // holds every finite MXFP4 value exactly.
  kMxfp4,
};

struct FusedExpert {
  FusedLayout layout = FusedLayout::kNone;
  int expert = 0;
  int num_experts = 0;
  std::string scales_name;  // kMxfp4
  // gpt-oss gate_up: the stored output index alternates gate (even) and up (odd); read rows
  // are de-interleaved to gate | up, the layout of every other gate_up.
  bool interleaved_gate_up = false;
};

struct WeightSpec {
  std::vector<std::string> names;  // stacked in this order; empty: the model has no such weight
  std::vector<int64_t> row_counts; // rows each tensor contributes (same length as names)
  int64_t cols = 1;                // 1 for vectors
  bool is_norm = false;            // a norm's scale vector (Gemma's (1 + w) applies to these)
  FusedExpert fused = {};          // layout kNone unless a slice of a fused expert tensor
  bool present() const { return !names.empty(); }
  int64_t rows() const;
  int64_t elements() const { return rows() * cols; }
};

// One expert's MLP, read as a dense one: Ie = MoeConfig::intermediate_size.
struct ExpertWeightSpecs {
  WeightSpec gate_up;       // [2 Ie][D] rows: gate | up
  WeightSpec down;          // [D][Ie]
  WeightSpec gate_up_bias;  // [2 Ie] gate | up (gpt-oss) or absent
  WeightSpec down_bias;     // [D] (gpt-oss) or absent
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
  WeightSpec gate_up;         // [2 I][D] rows: gate | up; absent on a mixture-of-experts layer
  WeightSpec down;            // [D][I]; absent on a mixture-of-experts layer
  WeightSpec sinks;           // [H] gpt-oss attention sinks, or absent
  // Mixture-of-experts layers (ModelConfig::is_moe_layer) instead of gate_up / down:
  WeightSpec router;                       // [E][D]
  WeightSpec router_bias;                  // [E] (gpt-oss) or absent
  std::vector<ExpertWeightSpecs> experts;  // [E]; empty on a dense layer
};

struct CheckpointMap {
  WeightSpec embed;       // [V][D]
  WeightSpec final_norm;  // [D]
  WeightSpec lm_head;     // [V][D]; with tied embeddings the embedding tensor itself
  std::vector<LayerWeightSpecs> layers;
};

CheckpointMap MapCheckpoint(const ModelConfig& config);

}  // namespace kvserve::model
