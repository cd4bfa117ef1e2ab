// fp32 weights of a Llama-family model, laid out for the CPU forward pass. Everything lives
// in one allocation; projections that read the same input are stacked at load time so one
// GEMM computes them together:
//
//   storage_: [embed][final_norm][lm_head?][layer 0][layer 1] ...     (64-byte aligned pieces)
//   layer:    input_norm [D]
//             qkv        [(H + 2*Hkv) * hd][D]   rows: q_proj | k_proj | v_proj
//             qkv_bias   [(H + 2*Hkv) * hd]      (Qwen2, Llama attention_bias)
//             o          [D][H * hd]
//             o_bias     [D]                     (Llama attention_bias)
//             post_norm  [D]
//             gate_up    [2 * I][D]              rows: gate_proj | up_proj
//             down       [D][I]
//
// With tied embeddings lm_head points at embed.
//
// The four projections and lm_head are also kept packed for kernels/cpu/packed_linear.h
// (16-output panels, k-major), which is what the forward pass reads: in bf16 or fp16, straight
// from the checkpoint's bytes, when the checkpoint stores them so (nothing is rounded, half
// the bytes are streamed per step; the kernels widen each weight exactly), else in fp32.
// The row-major fp32 copies above stay for code that reads checkpoint-layout weights
// (calibration, tests); dropping them for the projections is a memory saving left to do. Loading checks that every expected tensor
// is present with the expected shape; extra tensors (rotary caches and the like) are ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace kvserve::model {

// One projection in packed form: exactly one of the three is set.
struct PackedProjection {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const uint16_t* fp16 = nullptr;
};

struct LayerWeights {
  const float* input_norm = nullptr;
  const float* qkv = nullptr;
  const float* qkv_bias = nullptr;  // null when the model has none
  const float* o = nullptr;
  const float* o_bias = nullptr;    // null when the model has none
  const float* post_norm = nullptr;
  const float* gate_up = nullptr;
  const float* down = nullptr;
  // Packed (kernels/cpu/packed_linear.h) copies of qkv, o, gate_up and down.
  PackedProjection qkv_packed;
  PackedProjection o_packed;
  PackedProjection gate_up_packed;
  PackedProjection down_packed;
};

class LlamaWeights {
 public:
  static absl::StatusOr<LlamaWeights> Load(const ModelConfig& config,
                                           const SafetensorsCheckpoint& checkpoint);

  LlamaWeights(LlamaWeights&&) = default;
  LlamaWeights& operator=(LlamaWeights&&) = default;
  LlamaWeights(const LlamaWeights&) = delete;
  LlamaWeights& operator=(const LlamaWeights&) = delete;

  const float* embed() const { return embed_; }            // [V][D]
  const float* final_norm() const { return final_norm_; }  // [D]
  const float* lm_head() const { return lm_head_; }        // [V][D]
  const PackedProjection& lm_head_packed() const { return lm_head_packed_; }  // packed [V][D]
  bool bf16_projections() const { return lm_head_packed_.bf16 != nullptr; }
  bool fp16_projections() const { return lm_head_packed_.fp16 != nullptr; }
  const LayerWeights& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Bytes a forward step streams per token at batch 1: every weight except the embedding
  // table (only one row of it is read), including lm_head even when tied.
  size_t streamed_bytes() const { return streamed_bytes_; }
  size_t total_bytes() const { return storage_.size() * sizeof(float); }

 private:
  LlamaWeights() = default;
  std::vector<float> storage_;
  std::vector<float> packed_;          // fp32 packed copies, same order as storage_
  std::vector<uint16_t> packed_half_;  // or bf16 / fp16 ones
  PackedProjection lm_head_packed_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
  std::vector<LayerWeights> layers_;
  size_t streamed_bytes_ = 0;
};

}  // namespace kvserve::model
