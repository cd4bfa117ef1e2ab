#include "model/gguf_names.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::model {
namespace {

constexpr std::string_view kLayerKinds[] = {
    "attn_norm",     "attn_q",      "attn_k",        "attn_v",    "attn_qkv",
    "attn_output",   "attn_q_norm", "attn_k_norm",   "ffn_norm",  "post_attention_norm",
    "post_ffw_norm", "ffn_gate",    "ffn_up",        "ffn_down",  "ffn_gate_inp",
    "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "attn_sinks"};

// Tensors the converter adds for llama.cpp's own use; their content is in the config.
bool ReadIntoConfigImpl(std::string_view name) {
  return name == "rope_freqs.weight" || name == "rope_factors_long.weight" ||
         name == "rope_factors_short.weight";
}

// The Hugging Face name of a per-layer tensor `kind` ("attn_q") of layer `layer`, with its
// suffix ("weight" or "bias"), or nullopt when the architecture has no such tensor.
std::optional<GgufTensorName> MapLayerTensor(const ModelConfig& c, int layer, std::string_view kind,
                                             std::string_view suffix) {
  const Architecture a = c.architecture;
  const bool gemma = a == Architecture::kGemma2 || a == Architecture::kGemma3;
  // llama.cpp's `llama` architecture (Llama, Mistral, Mixtral) stores q/k rows permuted.
  const bool permuted =
      a == Architecture::kLlama || a == Architecture::kMistral || a == Architecture::kMixtral;
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  const std::string s = absl::StrCat(".", base::AsAbsl(suffix));
  auto plain = [&](std::string_view hf) {
    return GgufTensorName{"", absl::StrCat(p, base::AsAbsl(hf), s)};
  };
  const bool gpt_oss = a == Architecture::kGptOss;
  auto experts = [&](std::string_view mixtral, std::string_view qwen) {
    const std::string_view e = a == Architecture::kMixtral ? mixtral : qwen;
    const std::string_view group =
        a == Architecture::kMixtral ? "block_sparse_moe.experts.{e}." : "mlp.experts.{e}.";
    return GgufTensorName{"", absl::StrCat(p, base::AsAbsl(group), base::AsAbsl(e), s), true};
  };
  if (kind == "attn_norm") return plain("input_layernorm");
  if (kind == "attn_q")
    return GgufTensorName{"", plain("self_attn.q_proj").hf, false, permuted ? c.num_heads : 0};
  if (kind == "attn_k")
    return GgufTensorName{"", plain("self_attn.k_proj").hf, false, permuted ? c.num_kv_heads : 0};
  if (kind == "attn_v") return plain("self_attn.v_proj");
  if (kind == "attn_qkv") return plain("self_attn.qkv_proj");
  if (kind == "attn_output") return plain("self_attn.o_proj");
  if (kind == "attn_q_norm") return plain("self_attn.q_norm");
  if (kind == "attn_k_norm") return plain("self_attn.k_norm");
  if (kind == "ffn_norm" && !gpt_oss)
    return plain(gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm");
  if (kind == "post_attention_norm" && (gemma || gpt_oss)) return plain("post_attention_layernorm");
  // gpt-oss: attention sinks (one logit per head, no suffix in Hugging Face), the router, and
  // split experts with biases (ModelConfig::MoeConfig::split_experts).
  if (gpt_oss && kind == "attn_sinks" && suffix == "weight")
    return GgufTensorName{"", absl::StrCat(p, "self_attn.sinks")};
  if (gpt_oss && kind == "ffn_gate_inp") return plain("mlp.router");
  if (kind == "post_ffw_norm" && gemma) return plain("post_feedforward_layernorm");
  if (kind == "ffn_gate") return plain("mlp.gate_proj");
  if (kind == "ffn_up") return plain(a == Architecture::kPhi3 ? "mlp.gate_up_proj" : "mlp.up_proj");
  if (kind == "ffn_down") return plain("mlp.down_proj");
  if (kind == "ffn_gate_inp" && a == Architecture::kMixtral) return plain("block_sparse_moe.gate");
  if (kind == "ffn_gate_inp" && a == Architecture::kQwen3Moe) return plain("mlp.gate");
  if (a == Architecture::kMixtral || a == Architecture::kQwen3Moe || gpt_oss) {
    if (kind == "ffn_gate_exps") return experts("w1", "gate_proj");
    if (kind == "ffn_up_exps") return experts("w3", "up_proj");
    if (kind == "ffn_down_exps") return experts("w2", "down_proj");
  }
  return std::nullopt;
}

std::optional<GgufTensorName> MapTensorImpl(const ModelConfig& c, std::string_view name) {
  if (name == "token_embd.weight") return GgufTensorName{"", "model.embed_tokens.weight"};
  if (name == "output_norm.weight") return GgufTensorName{"", "model.norm.weight"};
  if (name == "output.weight") return GgufTensorName{"", "lm_head.weight"};
  if (ReadIntoConfigImpl(name)) return std::nullopt;
  // blk.<layer>.<kind>.<weight|bias>
  if (name.starts_with("blk.")) {
    const std::string_view rest = name.substr(4);
    const size_t dot = rest.find('.');
    const size_t last = rest.rfind('.');
    int layer = -1;
    if (dot != std::string_view::npos && last > dot &&
        absl::SimpleAtoi(base::AsAbsl(rest.substr(0, dot)), &layer) && layer >= 0 &&
        layer < c.num_layers) {
      const std::string_view kind = rest.substr(dot + 1, last - dot - 1);
      const std::string_view suffix = rest.substr(last + 1);
      if (suffix == "weight" || suffix == "bias") {
        if (auto m = MapLayerTensor(c, layer, kind, suffix)) return m;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view GgufArchitectureOf(const ModelConfig& c) {
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kMistral:
    case Architecture::kMixtral:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kQwen3Moe:
      return "qwen3moe";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGemma2:
      return "gemma2";
    case Architecture::kGemma3:
      return "gemma3";
    case Architecture::kGptOss:
      return "gpt-oss";
  }
  return "?";
}

std::optional<GgufTensorName> GgufToHf(const ModelConfig& config, std::string_view gguf_name) {
  std::optional<GgufTensorName> m = MapTensorImpl(config, gguf_name);
  if (m) m->gguf = std::string(gguf_name);
  return m;
}

bool GgufTensorReadIntoConfig(std::string_view gguf_name) { return ReadIntoConfigImpl(gguf_name); }

std::vector<GgufTensorName> AllGgufTensorNames(const ModelConfig& config) {
  std::vector<GgufTensorName> out;
  for (std::string_view g : {"token_embd.weight", "output_norm.weight", "output.weight"}) {
    if (auto m = GgufToHf(config, g)) out.push_back(*m);
  }
  for (int i = 0; i < config.num_layers; ++i) {
    for (std::string_view kind : kLayerKinds) {
      for (std::string_view suffix : {"weight", "bias"}) {
        const std::string name =
            absl::StrCat("blk.", i, ".", base::AsAbsl(kind), ".", base::AsAbsl(suffix));
        if (auto m = GgufToHf(config, name)) out.push_back(*m);
      }
    }
  }
  return out;
}

}  // namespace kvserve::model
