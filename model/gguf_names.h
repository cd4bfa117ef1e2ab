// The one table between llama.cpp's GGUF tensor names and the Hugging Face names our
// checkpoint map reads (checkpoint_map.h), used in both directions: by the GGUF reader
// (gguf_checkpoint.h) and by the GGUF writer (gguf_export.h).
//
//   GGUF                         Hugging Face (model.layers.<i>. prefix)      note
//   token_embd / output_norm / output  model.embed_tokens / model.norm / lm_head
//   blk.<i>.attn_norm            input_layernorm
//   blk.<i>.attn_q / attn_k      self_attn.q_proj / k_proj     rows permuted per head
//                                                              (llama architecture only)
//   blk.<i>.attn_v / attn_output self_attn.v_proj / o_proj
//   blk.<i>.attn_qkv             self_attn.qkv_proj            Phi-3
//   blk.<i>.attn_q_norm / _k_    self_attn.q_norm / k_norm     Qwen3, Gemma 3
//   blk.<i>.ffn_norm             post_attention_layernorm      Gemma: pre_feedforward_layernorm
//   blk.<i>.post_attention_norm  post_attention_layernorm      Gemma only
//   blk.<i>.post_ffw_norm        post_feedforward_layernorm    Gemma only
//   blk.<i>.ffn_gate/_up/_down   mlp.gate_proj/up_proj/down_proj  Phi-3: ffn_up = gate_up_proj
//   blk.<i>.ffn_gate_inp         block_sparse_moe.gate (Mixtral), mlp.gate (Qwen3-MoE)
//   blk.<i>.ffn_{gate,up,down}_exps  experts.<e>.{w1,w3,w2} (Mixtral),
//                                    mlp.experts.<e>.{gate,up,down}_proj (Qwen3-MoE): one 3-D
//                                    tensor [in, out, experts] for all experts;
//                                    gpt-oss: mlp.experts.<e>.{gate,up,down}_proj, biases too
//                                    ([out, experts])
//   blk.<i>.post_attention_norm  post_attention_layernorm      gpt-oss (its only FFN norm)
//   blk.<i>.attn_sinks           self_attn.sinks               gpt-oss
//   blk.<i>.ffn_gate_inp         mlp.router (+ bias)           gpt-oss
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace kvserve::model {

struct GgufTensorName {
  std::string gguf;
  // The Hugging Face name; for an experts tensor it holds "{e}" where the expert index goes.
  std::string hf;
  bool experts = false;
  // Rows permuted per head in the GGUF file (SafetensorsEntry::permute_heads), 0 if not.
  int32_t permute_heads = 0;
};

// llama.cpp's architecture name of the config ("llama", "qwen2", ...).
std::string_view GgufArchitectureOf(const ModelConfig& config);

// The Hugging Face side of a GGUF tensor name, or nullopt when the architecture has no such
// tensor.
std::optional<GgufTensorName> GgufToHf(const ModelConfig& config, std::string_view gguf_name);

// Tensors the converter adds for llama.cpp's own use, whose content gguf_config.h reads into
// the configuration (rope_freqs, rope_factors_long/short).
bool GgufTensorReadIntoConfig(std::string_view gguf_name);

// Every tensor name pair a model of this configuration can have (biases and norms included
// whether or not the model has them), for writers.
std::vector<GgufTensorName> AllGgufTensorNames(const ModelConfig& config);

}  // namespace kvserve::model
