// A Hugging Face integer-quantized checkpoint (AWQ, GPTQ, compressed-tensors int; see
// hf_quant_config.h) presented to the loader the way a GGUF file is (gguf_checkpoint.h): each
// quantized module's tensors are hidden behind one block tensor under the module's
// Hugging Face weight name, so the loader packs it with PackBlockProjection like any GGUF
// projection and the weights stay quantized in memory:
//
//   model.layers.0.mlp.up_proj.qweight ┐
//   model.layers.0.mlp.up_proj.qzeros  ├──►  model.layers.0.mlp.up_proj.weight
//   model.layers.0.mlp.up_proj.scales  │     dtype Q4_0 / Q8_0 / U4_F32 / U8_F32, [out][in]
//   model.layers.0.mlp.up_proj.g_idx   ┘     (hf_quant_weights.h)
//                                            + ...up_proj.weight_input_order I32 [in] when
//                                              g_idx is act-order (block_weights.h gathers)
//   model.embed_tokens.weight, norms, lm_head (ignored modules) ──► as stored
//
// Every module's tensors are checked when the checkpoint is opened (start-up errors name the
// tensor); a block tensor's rows are written when the loader first asks for its bytes and
// dropped when it releases them (one module's rows resident at a time while loading).
#pragma once

#include "absl/status/statusor.h"
#include "model/hf_quant_config.h"
#include "model/safetensors.h"

namespace kvserve::model {

absl::StatusOr<SafetensorsCheckpoint> OpenHfQuantCheckpoint(SafetensorsCheckpoint inner,
                                                            const HfQuantConfig& cfg);

}  // namespace kvserve::model
