// Projections and embeddings stored in ggml block types (GGUF files, quant/block_type.h), read
// into the quantized linear layer's repacked form (kernels/cpu/quant/quant_linear.h):
//
//   WeightSpec qkv = q_proj | k_proj | v_proj          QuantMatrix segments
//     q_proj  Q4_K  (permuted per head in the file) ──► [ Q4_K rows of q (un-permuted) ]
//     k_proj  Q4_K  (permuted per head in the file) ──► [ Q4_K rows of k (un-permuted) ]
//     v_proj  Q6_K                                  ──► [ Q6_K rows of v               ]
//
// A stacked spec may mix block types and F32/F16/BF16 tensors (llama.cpp's presets do, e.g.
// Q4_K_M's Q6_K attn_v); each tensor becomes one segment. Unpermuted tensors are packed
// straight from the mapped file, permuted ones from a copy in Hugging Face row order (whole
// rows move, blocks lie within rows: no dequantization). Block data is not scanned for NaN:
// a corrupt scale shows up in the logits, where the engine's checks catch non-finite values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/cpu/quant/quant_linear.h"
#include "model/checkpoint_map.h"
#include "model/safetensors.h"
#include "quant/block_type.h"

namespace kvserve::model {

// The block type of a stored tensor (F32, F16 and BF16 too), or InvalidArgument naming the
// file, tensor and dtype when no kernel reads it.
absl::StatusOr<quant::BlockType> EntryBlockType(const TensorFile& file,
                                                const SafetensorsEntry& entry);

// A block tensor `X` may come with `X` + kInputOrderSuffix, I32 [cols]: its stored columns'
// input elements (act-order Hugging Face checkpoints, hf_quant_checkpoint.h); the projection
// then gathers its activations in that order (QuantSource::input_order).
inline constexpr std::string_view kInputOrderSuffix = "_input_order";

// Whether any tensor of the spec is stored in a quantized block type.
absl::StatusOr<bool> SpecHasBlocks(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

// The spec's tensors as one quantized matrix [rows][cols], one segment per tensor.
absl::StatusOr<kernels::cpu::quant::QuantMatrix> PackBlockProjection(
    const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

// Bytes the spec's tensors take as stored (what a batch-1 step would stream from the file).
absl::StatusOr<size_t> StoredBytes(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

}  // namespace kvserve::model
