// A GGUF model presented as a checkpoint under Hugging Face tensor names, so that the one
// checkpoint map (checkpoint_map.h) and the readers (tensor_reader.h, block_weights.h) serve
// GGUF files unchanged:
//
//   GGUF (ne innermost first)            checkpoint entry (Hugging Face name and shape)
//   token_embd.weight     [D, V]   ──►   model.embed_tokens.weight          [V][D]
//   blk.3.attn_q.weight   [D, Hq]  ──►   model.layers.3.self_attn.q_proj.weight  [Hq][D]
//                                        (llama architecture: permute_heads = num_heads)
//   blk.3.ffn_up_exps.weight [D, I, E] ─► model.layers.3.block_sparse_moe.experts.<e>.w3.weight
//                                        [I][D] each: expert e's rows, no copy
//
// Entries point into the mapped GGUF files (the model stays open as long as the checkpoint);
// their dtype is the tensor's ggml type name. Tensors the forward pass does not read
// (rope_freqs: read into the config by gguf_config.h) are left out; an unknown tensor name is
// refused, naming it, rather than ignored.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace kvserve::model {

// `config` is LoadGgufModelConfig(*gguf).
absl::StatusOr<SafetensorsCheckpoint> OpenGgufCheckpoint(
    std::shared_ptr<const gguf::GgufModel> gguf, const ModelConfig& config);

}  // namespace kvserve::model
