// The weights of a decoder checkpoint as the CPU forward pass reads them, loaded from the
// memory-mapped safetensors files in the checkpoint's own precision: a bf16 or fp16
// checkpoint stays bf16 or fp16, and nothing is kept twice.
//
//   owned, fp32:   norms and biases (a few KB per layer)
//   owned, packed: each projection packed once (kernels/cpu/packed_linear.h) in the dtype
//                  its tensors have (F32, BF16 or F16: the kernels widen bf16/fp16 exactly),
//                  qkv = q | k | v and gate_up = gate | up stacked so one GEMM reads them
//   mapped:        the embedding table, in the checkpoint's dtype; rows are gathered (and
//                  widened) per token, so only the pages of tokens seen become resident
//   lm_head:       packed like a projection (from the embedding tensor when tied)
//   GGUF files:    projections stored in ggml block types stay quantized, repacked for the
//                  quantized kernels (model/block_weights.h); a quantized embedding table stays
//                  mapped and its rows are dequantized per token
//   experts:       each expert's gate_up and down packed like a dense layer's, the router
//                  like a projection; gpt-oss's fused (and MXFP4) expert tensors are sliced
//                  per expert at load (fused_expert_reader.h), MXFP4 unpacked to bf16
//
// Loading reads one projection at a time from the map into a staging buffer, packs it and
// drops the source pages from the resident set (tensor_reader.h), so peak resident memory
// is the packed weights plus one projection. Without `pack` (a device backend uploads from
// checkpoint() itself) only the norms, biases and the mapping are kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/quant/quant_linear.h"
#include "model/checkpoint_map.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/tensor_reader.h"

namespace kvserve::model {

// One projection in packed form: exactly one of the four is set.
struct PackedProjection {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const uint16_t* fp16 = nullptr;
  // Stored in ggml block types (a GGUF file): repacked quantized blocks (model/block_weights.h).
  const kernels::cpu::quant::QuantMatrix* quant = nullptr;
  bool empty() const { return f32 == nullptr && bf16 == nullptr && fp16 == nullptr && quant == nullptr; }
};

// y (=|+=) x · wᵀ + bias on whichever packed form the weights came in (bias may be null).
void Project(const float* x, int64_t x_stride, const PackedProjection& w, const float* bias, float* y,
             int64_t y_stride, int64_t rows, int in, int out, bool accumulate);

// One expert of a mixture-of-experts layer: a gated MLP of MoeConfig::intermediate_size.
struct ExpertWeights {
  PackedProjection gate_up;             // [2 Ie][D] rows: gate | up
  PackedProjection down;                // [D][Ie]
  const float* gate_up_bias = nullptr;  // [2 Ie] gate | up (gpt-oss), else null
  const float* down_bias = nullptr;     // [D] (gpt-oss), else null
};

struct MoeLayerWeights {
  PackedProjection router;             // [E][D]
  const float* router_bias = nullptr;  // [E] (gpt-oss), else null
  std::vector<ExpertWeights> experts;  // [E]
};

struct LayerWeights {
  const float* input_norm = nullptr;
  const float* qkv_bias = nullptr;        // null when the model has none
  const float* q_norm = nullptr;          // [hd], null when the model has none
  const float* k_norm = nullptr;
  const float* o_bias = nullptr;          // null when the model has none
  const float* post_attn_norm = nullptr;  // null unless sandwich norms (Gemma)
  const float* pre_ff_norm = nullptr;
  const float* post_ff_norm = nullptr;    // null unless sandwich norms
  PackedProjection qkv;
  PackedProjection o;
  PackedProjection gate_up;              // empty on a mixture-of-experts layer
  PackedProjection down;                 // empty on a mixture-of-experts layer
  const float* sinks = nullptr;          // [H] gpt-oss attention sinks (fp32), null when none
  const MoeLayerWeights* moe = nullptr;  // the layer's experts, null on a dense layer
};

// Which weights a pipeline stage holds (llama_model.h ModelOptions::layer_begin): its
// layers, the embedding on the first stage, the final norm and lm_head on the last. The
// default is the whole model.
struct WeightRange {
  int layer_begin = 0;
  int layer_end = -1;  // -1: to the last layer
};

class LlamaWeights {
 public:
  // Takes the opened checkpoint (it stays mapped for as long as the weights live). Layers
  // outside `range` are left empty (LayerWeights{}), as are the embedding (EmbedRows must not
  // be called) and lm_head / final norm when the range does not reach them.
  static absl::StatusOr<LlamaWeights> Load(const ModelConfig& config, SafetensorsCheckpoint checkpoint,
                                           bool pack = true, WeightRange range = {});

  LlamaWeights(LlamaWeights&&) = default;
  LlamaWeights& operator=(LlamaWeights&&) = default;
  LlamaWeights(const LlamaWeights&) = delete;
  LlamaWeights& operator=(const LlamaWeights&) = delete;

  // out[i][0..D) = embed[ids[i]] as fp32 (exact widening).
  void EmbedRows(const int32_t* ids, int64_t n, float* out) const;
  const float* final_norm() const { return final_norm_; }  // [D]
  const PackedProjection& lm_head() const { return lm_head_; }  // packed [V][D]
  bool packed() const { return packed_; }
  WeightDtype embed_dtype() const { return embed_dtype_; }
  // The embedding's block type when it is stored quantized (a GGUF file), else nullopt.
  std::optional<quant::BlockType> embed_block_type() const { return embed_block_; }
  // Some projection is stored in ggml block types.
  bool quantized_projections() const { return !quant_.empty(); }
  // Every projection (lm_head included) is stored so in the checkpoint (packed or not).
  bool bf16_projections() const { return all_bf16_; }
  bool fp16_projections() const { return all_fp16_; }
  const LayerWeights& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const SafetensorsCheckpoint& checkpoint() const { return checkpoint_; }
  const CheckpointMap& map() const { return map_; }
  // Bytes a forward step streams per token at batch 1: every weight except the embedding
  // table (only one row of it is read), including lm_head even when tied. Of a mixture-of-
  // experts layer the router and top_k / num_experts of the expert bytes (the top_k experts a
  // token runs through; expert biases count in full, they are small).
  size_t streamed_bytes() const { return streamed_bytes_; }
  // Bytes this object holds in memory (packed projections, norms, biases; not the map).
  size_t resident_bytes() const { return owned_bytes_; }

 private:
  LlamaWeights() = default;
  // 64-byte aligned, uninitialised: pages are committed as packing writes them.
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  SafetensorsCheckpoint checkpoint_;
  CheckpointMap map_;
  std::unique_ptr<std::byte, FreeDeleter> packed_storage_;
  std::vector<float> small_;  // norms and biases
  const std::byte* embed_ = nullptr;  // mapped [V][D] in embed_dtype_ (or embed_block_)
  WeightDtype embed_dtype_ = WeightDtype::kF32;
  std::optional<quant::BlockType> embed_block_;
  size_t embed_row_bytes_ = 0;
  std::vector<std::unique_ptr<kernels::cpu::quant::QuantMatrix>> quant_;  // block projections
  int hidden_ = 0;
  const float* final_norm_ = nullptr;
  PackedProjection lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<MoeLayerWeights> moe_;  // [layers]; LayerWeights::moe points into it (MoE layers)
  bool packed_ = false;
  bool all_bf16_ = false, all_fp16_ = false;
  size_t streamed_bytes_ = 0;
  size_t owned_bytes_ = 0;
};

}  // namespace kvserve::model
