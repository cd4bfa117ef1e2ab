#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "model/config_reader.h"
#include "model/rope_table.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using internal::ConfigReader;
using nlohmann::json;

constexpr Architecture kArchitectures[] = {
    Architecture::kLlama,    Architecture::kMistral, Architecture::kQwen2,  Architecture::kQwen3,
    Architecture::kPhi3,     Architecture::kGemma2,  Architecture::kGemma3, Architecture::kMixtral,
    Architecture::kQwen3Moe, Architecture::kGptOss};

bool IsGemma(Architecture a) { return a == Architecture::kGemma2 || a == Architecture::kGemma3; }
// Qwen2's window gates (use_sliding_window, max_window_layers) apply.
bool IsQwen(Architecture a) {
  return a == Architecture::kQwen2 || a == Architecture::kQwen3 || a == Architecture::kQwen3Moe;
}

std::string SupportedArchitectures() {
  std::string out;
  for (Architecture a : kArchitectures) absl::StrAppend(&out, out.empty() ? "" : ", ", base::AsAbsl(ArchitectureName(a)));
  return out;
}

absl::StatusOr<int> ToInt(int64_t x, const ConfigReader& r, const char* field) {
  if (x > (int64_t{1} << 30)) return r.Error(field, absl::StrCat("too large: ", x));
  return static_cast<int>(x);
}

absl::Status ParseRopeScaling(const json& root, std::string_view origin, ModelConfig& c) {
  ConfigReader top(root, origin);
  if (!top.Has("rope_scaling")) return absl::OkStatus();
  const json& rs = root.at("rope_scaling");
  if (!rs.is_object()) return top.Error("rope_scaling", "expected an object or null");
  ConfigReader r(rs, origin, "rope_scaling.");
  // Newer configs say rope_type, older ones type; both mean the same.
  std::string type;
  if (rs.contains("rope_type")) {
    KVS_ASSIGN_OR_RETURN(type, r.String("rope_type", ""));
  } else {
    KVS_ASSIGN_OR_RETURN(type, r.String("type", ""));
  }
  constexpr const char* kSupported = "supported: default, linear, llama3, yarn, dynamic, longrope";
  if (type.empty()) return r.Error("rope_type", absl::StrCat("missing (", kSupported, ")"));
  if (type == "default") return absl::OkStatus();
  RopeScaling& s = c.rope_scaling;
  // The pre-trained context: inside rope_scaling (llama3, yarn), else top-level (Phi-3).
  KVS_ASSIGN_OR_RETURN(int64_t top_original, top.Int("original_max_position_embeddings", c.max_position_embeddings));
  KVS_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                       r.Int("original_max_position_embeddings", type == "llama3" ? 8192 : top_original));
  if (type == "longrope" || type == "su") {
    s.kind = RopeScalingKind::kLongRope;
    KVS_ASSIGN_OR_RETURN(s.short_factor, r.Numbers("short_factor"));
    KVS_ASSIGN_OR_RETURN(s.long_factor, r.Numbers("long_factor"));
    const size_t half = static_cast<size_t>(c.rotary_dim / 2);
    if (s.short_factor.size() != half || s.long_factor.size() != half) {
      return r.Error("short_factor", absl::StrCat("short_factor and long_factor need ", half,
                                                  " entries (rotary_dim / 2) each, got ", s.short_factor.size(),
                                                  " and ", s.long_factor.size()));
    }
    for (double f : s.short_factor) if (!(f > 0)) return r.Error("short_factor", "entries must be > 0");
    for (double f : s.long_factor) if (!(f > 0)) return r.Error("long_factor", "entries must be > 0");
    if (r.Has("attention_factor")) {
      KVS_ASSIGN_OR_RETURN(double af, r.Number("attention_factor", 1.0));
      s.attention_factor = af;
    }
    return absl::OkStatus();
  }
  KVS_ASSIGN_OR_RETURN(double factor, r.Number("factor", 0.0));
  if (!(factor >= 1.0)) return r.Error("factor", absl::StrCat("must be >= 1, got ", factor));
  s.factor = factor;
  if (type == "linear") {
    s.kind = RopeScalingKind::kLinear;
    return absl::OkStatus();
  }
  if (type == "llama3") {
    s.kind = RopeScalingKind::kLlama3;
    KVS_ASSIGN_OR_RETURN(s.low_freq_factor, r.Number("low_freq_factor", 1.0));
    KVS_ASSIGN_OR_RETURN(s.high_freq_factor, r.Number("high_freq_factor", 4.0));
    if (!(s.high_freq_factor > s.low_freq_factor) || s.low_freq_factor <= 0) {
      return r.Error("low_freq_factor", "llama3 needs 0 < low_freq_factor < high_freq_factor");
    }
    return absl::OkStatus();
  }
  if (type == "yarn") {
    s.kind = RopeScalingKind::kYarn;
    KVS_ASSIGN_OR_RETURN(s.beta_fast, r.Number("beta_fast", 32.0));
    KVS_ASSIGN_OR_RETURN(s.beta_slow, r.Number("beta_slow", 1.0));
    if (!(s.beta_fast > 0) || !(s.beta_slow > 0)) return r.Error("beta_fast", "beta_fast and beta_slow must be > 0");
    if (r.Has("attention_factor")) {
      KVS_ASSIGN_OR_RETURN(double af, r.Number("attention_factor", 1.0));
      if (!(af > 0)) return r.Error("attention_factor", "must be > 0");
      s.attention_factor = af;
    }
    KVS_ASSIGN_OR_RETURN(s.mscale, r.Number("mscale", 0.0));
    KVS_ASSIGN_OR_RETURN(s.mscale_all_dim, r.Number("mscale_all_dim", 0.0));
    KVS_ASSIGN_OR_RETURN(s.truncate, r.Bool("truncate", true));
    return absl::OkStatus();
  }
  if (type == "dynamic") {
    s.kind = RopeScalingKind::kDynamic;
    // Hugging Face's dynamic NTK grows the context past max_position_embeddings by factor.
    s.original_max_position_embeddings = c.max_position_embeddings;
    return absl::OkStatus();
  }
  return r.Error("rope_type", absl::StrCat("unsupported rope type \"", type, "\" (", kSupported, ")"));
}

absl::Status ParseTokenIds(const json& root, std::string_view origin, ModelConfig& c) {
  ConfigReader r(root, origin);
  if (r.Has("bos_token_id")) {
    KVS_ASSIGN_OR_RETURN(int64_t bos, r.Int("bos_token_id", std::nullopt, 0));
    c.bos_token_id = static_cast<int32_t>(bos);
  }
  if (r.Has("eos_token_id")) {
    const json& eos = root.at("eos_token_id");
    // A single id or (Llama 3) a list of them.
    if (eos.is_array()) {
      for (const json& e : eos) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0) return r.Error("eos_token_id", "expected ids >= 0");
        c.eos_token_ids.push_back(e.get<int32_t>());
      }
    } else {
      KVS_ASSIGN_OR_RETURN(int64_t id, r.Int("eos_token_id", std::nullopt, 0));
      c.eos_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  for (int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) return r.Error("eos_token_id", absl::StrCat(id, " >= vocab_size ", c.vocab_size));
  }
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size) {
    return r.Error("bos_token_id", absl::StrCat(*c.bos_token_id, " >= vocab_size ", c.vocab_size));
  }
  return absl::OkStatus();
}

// Which layers attend through a sliding window: `layer_types` when the config lists it
// (newer Hugging Face configs do for every hybrid model), else each architecture's rule.
absl::Status ParseLayerWindows(const json& root, const ConfigReader& r, ModelConfig& c) {
  c.layer_window.assign(static_cast<size_t>(c.num_layers), 0);
  const Architecture a = c.architecture;
  if (a == Architecture::kLlama) return absl::OkStatus();  // Llama has no windowed layers
  bool used = r.Has("sliding_window");
  if (IsQwen(a)) {
    KVS_ASSIGN_OR_RETURN(bool use, r.Bool("use_sliding_window", false));
    used = used && use;
  }
  // Gemma and gpt-oss always alternate windowed and full layers (GptOssConfig: 128).
  if (IsGemma(a) || a == Architecture::kGptOss) used = true;
  if (!used) return absl::OkStatus();
  std::optional<int64_t> default_window;
  if (IsGemma(a)) default_window = 4096;
  if (a == Architecture::kGptOss) default_window = 128;
  KVS_ASSIGN_OR_RETURN(int64_t window, r.Int("sliding_window", default_window));
  KVS_ASSIGN_OR_RETURN(int w, ToInt(window, r, "sliding_window"));
  if (r.Has("layer_types")) {
    const json& types = root.at("layer_types");
    if (!types.is_array() || types.size() != static_cast<size_t>(c.num_layers)) {
      return r.Error("layer_types", absl::StrCat("expected a list of ", c.num_layers, " layer types"));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
      if (t == "sliding_attention") {
        c.layer_window[i] = w;
      } else if (t != "full_attention") {
        return r.Error("layer_types", absl::StrCat("layer ", i, ": unsupported type \"", t,
                                                   "\" (supported: full_attention, sliding_attention)"));
      }
    }
  } else {
    for (int i = 0; i < c.num_layers; ++i) {
      bool sliding = true;
      switch (a) {
        case Architecture::kQwen2:
        case Architecture::kQwen3:
        case Architecture::kQwen3Moe: {
          KVS_ASSIGN_OR_RETURN(int64_t first, r.Int("max_window_layers", 28, 0));
          sliding = i >= first;
          break;
        }
        case Architecture::kGemma2:
        case Architecture::kGptOss:
          sliding = i % 2 == 0;
          break;
        case Architecture::kGemma3: {
          KVS_ASSIGN_OR_RETURN(int64_t pattern, r.Int("sliding_window_pattern", 6));
          sliding = (i + 1) % pattern != 0;
          break;
        }
        default:
          break;
      }
      if (sliding) c.layer_window[static_cast<size_t>(i)] = w;
    }
  }
  if (c.any_sliding_layer()) c.sliding_window = w;
  return absl::OkStatus();
}

// What each architecture switches on beyond the shared fields.
absl::Status ParseArchitecture(const ConfigReader& r, ModelConfig& c) {
  KVS_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Error("mlp_bias", "MLP biases are not supported");
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
    case Architecture::kGemma2:
    case Architecture::kGemma3:
    case Architecture::kGptOss: {
      // GptOssConfig defaults attention_bias to true (the release sets it).
      KVS_ASSIGN_OR_RETURN(bool bias,
                           r.Bool("attention_bias", c.architecture == Architecture::kGptOss));
      c.qkv_bias = bias;
      c.o_bias = bias;
      break;
    }
    case Architecture::kMistral:
    case Architecture::kMixtral:
    case Architecture::kPhi3:
      break;  // no biases; Phi-3's projections are fused (checkpoint_map.cc)
    case Architecture::kQwen2:
      c.qkv_bias = true;  // Qwen2 hard-wires q/k/v biases; o_proj has none.
      break;
  }
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe ||
              c.architecture == Architecture::kGemma3;
  c.attention_sinks = c.architecture == Architecture::kGptOss;
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (!IsGemma(c.architecture)) {
    KVS_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
    if (act != "silu") return r.Error("hidden_act", absl::StrCat("unsupported \"", act, "\" (supported: silu)"));
    return absl::OkStatus();
  }
  // Gemma 2 and 3: https://arxiv.org/abs/2408.00118 and the Gemma 3 report; defaults as
  // Hugging Face's Gemma2Config / Gemma3TextConfig.
  c.sandwich_norms = true;
  c.norm_weight_offset = true;
  c.scale_embedding = true;
  std::string act;
  if (r.Has("hidden_activation")) {
    KVS_ASSIGN_OR_RETURN(act, r.String("hidden_activation", ""));
  } else {
    KVS_ASSIGN_OR_RETURN(act, r.String("hidden_act", "gelu_pytorch_tanh"));
  }
  if (act != "gelu_pytorch_tanh") {
    return r.Error("hidden_activation", absl::StrCat("unsupported \"", act, "\" (supported: gelu_pytorch_tanh)"));
  }
  c.activation = Activation::kGeluTanh;
  KVS_ASSIGN_OR_RETURN(double qpas, r.Number("query_pre_attn_scalar", 256.0));
  if (!(qpas > 0)) return r.Error("query_pre_attn_scalar", "must be > 0");
  c.attention_scale = 1.0 / std::sqrt(qpas);
  const bool gemma2 = c.architecture == Architecture::kGemma2;
  KVS_ASSIGN_OR_RETURN(c.attn_logit_softcap, r.Number("attn_logit_softcapping", gemma2 ? 50.0 : 0.0));
  KVS_ASSIGN_OR_RETURN(c.final_logit_softcap, r.Number("final_logit_softcapping", gemma2 ? 30.0 : 0.0));
  if (c.attn_logit_softcap < 0 || c.final_logit_softcap < 0) {
    return r.Error("attn_logit_softcapping", "soft caps must be >= 0 (or null)");
  }
  if (!gemma2) {
    KVS_ASSIGN_OR_RETURN(double local, r.Number("rope_local_base_freq", 10000.0));
    if (!(local > 1.0)) return r.Error("rope_local_base_freq", "must be > 1");
    c.rope_local_theta = local;
  }
  return absl::OkStatus();
}

// The mixture-of-experts fields (defaults as Hugging Face's MixtralConfig, Qwen3MoeConfig
// and GptOssConfig) and which layers use them. Dense architectures get layer_moe all 0.
absl::Status ParseMoe(const json& root, const ConfigReader& r, ModelConfig& c) {
  c.layer_moe.assign(static_cast<size_t>(c.num_layers), 0);
  const Architecture a = c.architecture;
  // ---- quantization_config dispatch (model/hf_quant_config.h) ----
  if (r.Has("quantization_config")) {
    const std::string q = root.at("quantization_config").dump();
    std::string method;
    switch (ClassifyQuantization(q, &method)) {
      case QuantizationFamily::kMxfp4:  // gpt-oss's MXFP4 experts, unpacked at load
        if (a != Architecture::kGptOss) {
          return r.Error("quantization_config",
                         absl::StrCat("quant_method \"mxfp4\" is only supported for gpt-oss, not ",
                                      c.architecture_name));
        }
        c.moe.mxfp4 = true;
        break;
      case QuantizationFamily::kInteger: {  // AWQ, GPTQ, compressed-tensors int
        if (a == Architecture::kGptOss) {
          return r.Error("quantization_config", absl::StrCat("quant_method \"", method,
                                                             "\" is not supported for gpt-oss"));
        }
        auto parsed = ParseHfQuantConfig(q, "");
        if (!parsed.ok()) {
          return r.Error("quantization_config", base::AsStd(parsed.status().message()));
        }
        c.hf_quant = *std::move(parsed);
        break;
      }
      case QuantizationFamily::kFp8:  // slot for the FP8 path
        return r.Error("quantization_config",
                       absl::StrCat("FP8 quant_method \"", method, "\" is not supported yet"));
      case QuantizationFamily::kOther:
        return r.Error("quantization_config",
                       absl::StrCat("quant_method \"", method,
                                    "\" is not supported (supported: awq "
                                    "GEMM int4, gptq int4/int8, compressed-tensors pack-quantized "
                                    "int4/int8 and int-quantized W8A8, gpt-oss mxfp4)"));
    }
  }
  // ---- end quantization_config dispatch ----
  if (a != Architecture::kMixtral && a != Architecture::kQwen3Moe && a != Architecture::kGptOss) {
    return absl::OkStatus();
  }
  MoeConfig& m = c.moe;
  const bool qwen = a == Architecture::kQwen3Moe;
  const char* experts_field = qwen ? "num_experts" : "num_local_experts";
  KVS_ASSIGN_OR_RETURN(int64_t experts,
                       r.Int(experts_field, a == Architecture::kMixtral ? 8 : 128, qwen ? 0 : 1));
  KVS_ASSIGN_OR_RETURN(m.num_experts, ToInt(experts, r, experts_field));
  KVS_ASSIGN_OR_RETURN(int64_t top_k, r.Int("num_experts_per_tok", a == Architecture::kMixtral ? 2
                                                                   : qwen                      ? 8
                                                                          : 4));
  if (m.num_experts > 0 && top_k > m.num_experts) {
    return r.Error("num_experts_per_tok",
                   absl::StrCat(top_k, " exceeds the ", m.num_experts, " experts"));
  }
  m.top_k = static_cast<int>(top_k);
  m.intermediate_size = c.intermediate_size;
  switch (a) {
    case Architecture::kMixtral:
      m.renormalize = true;  // MixtralSparseMoeBlock always divides by the top-k sum
      break;
    case Architecture::kQwen3Moe: {
      KVS_ASSIGN_OR_RETURN(int64_t mi, r.Int("moe_intermediate_size", 768));
      KVS_ASSIGN_OR_RETURN(m.intermediate_size, ToInt(mi, r, "moe_intermediate_size"));
      KVS_ASSIGN_OR_RETURN(m.renormalize, r.Bool("norm_topk_prob", false));
      break;
    }
    default: {  // gpt-oss
      m.routing = MoeRouting::kTopKSoftmax;
      m.renormalize = false;
      m.router_bias = true;
      m.expert_bias = true;
      m.activation = ExpertActivation::kClampedSwiglu;
      KVS_ASSIGN_OR_RETURN(m.swiglu_limit, r.Number("swiglu_limit", 7.0));
      if (!(m.swiglu_limit > 0)) return r.Error("swiglu_limit", "must be > 0");
      if (r.Has("experts_per_token")) {
        KVS_ASSIGN_OR_RETURN(int64_t ept, r.Int("experts_per_token", std::nullopt));
        if (ept != top_k) return r.Error("experts_per_token", "differs from num_experts_per_tok");
      }
      // MXFP4 blocks are 32 elements along each expert matrix's input dimension.
      if (m.mxfp4 && (c.hidden_size % 32 != 0 || m.intermediate_size % 32 != 0)) {
        return r.Error("quantization_config",
                       "MXFP4 experts need hidden and intermediate sizes divisible by 32");
      }
      break;
    }
  }
  // Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
  // (and there are experts at all); Mixtral and gpt-oss: every layer.
  std::vector<int64_t> mlp_only;
  int64_t step = 1;
  if (qwen) {
    KVS_ASSIGN_OR_RETURN(step, r.Int("decoder_sparse_step", 1));
    if (r.Has("mlp_only_layers")) {
      const json& l = root.at("mlp_only_layers");
      if (!l.is_array()) return r.Error("mlp_only_layers", "expected a list of layer indices");
      for (const json& v : l) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0) {
          return r.Error("mlp_only_layers",
                         absl::StrCat("expected layer indices >= 0, got ", v.dump()));
        }
        mlp_only.push_back(v.get<int64_t>());
      }
    }
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const bool listed = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    c.layer_moe[static_cast<size_t>(i)] = m.num_experts > 0 && !listed && (i + 1) % step == 0;
  }
  return absl::OkStatus();
}

int64_t DefaultMaxPositions(Architecture a) {
  switch (a) {
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
      return 32768;
    case Architecture::kMixtral:
      return 131072;
    case Architecture::kGptOss:
      return 131072;
    case Architecture::kPhi3: return 4096;
    case Architecture::kGemma2: return 8192;
    case Architecture::kGemma3: return 131072;
    default: return 2048;
  }
}

}  // namespace

std::string_view ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
    case Architecture::kPhi3: return "Phi3ForCausalLM";
    case Architecture::kGemma2: return "Gemma2ForCausalLM";
    case Architecture::kGemma3: return "Gemma3ForCausalLM";
    case Architecture::kMixtral:
      return "MixtralForCausalLM";
    case Architecture::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Architecture::kGptOss:
      return "GptOssForCausalLM";
  }
  return "?";
}

namespace {

// Parameters with `experts` of each MoE layer's experts counted.
int64_t CountParameters(const ModelConfig& c, int64_t experts) {
  const int64_t d = c.hidden_size;
  const int64_t norms = c.sandwich_norms ? 4 * d : 2 * d;
  const int64_t attention = norms + d * (c.q_size() + 2 * c.kv_size()) + c.q_size() * d +
                            (c.qkv_bias ? c.q_size() + 2 * c.kv_size() : 0) + (c.o_bias ? d : 0) +
                            (c.qk_norm ? 2 * c.head_dim : 0) +
                            (c.attention_sinks ? c.num_heads : 0);
  const MoeConfig& m = c.moe;
  const int64_t mi = m.intermediate_size;
  const int64_t expert = 3 * d * mi + (m.expert_bias ? 2 * mi + d : 0);
  const int64_t moe = m.num_experts * d + (m.router_bias ? m.num_experts : 0) + experts * expert;
  const int64_t dense = 3 * d * int64_t{c.intermediate_size};
  int64_t total = 0;
  for (int i = 0; i < c.num_layers; ++i) total += attention + (c.is_moe_layer(i) ? moe : dense);
  return total + d + c.vocab_size * d * (c.tie_word_embeddings ? 1 : 2);
}

}  // namespace

int64_t ModelConfig::num_parameters() const { return CountParameters(*this, moe.num_experts); }
int64_t ModelConfig::num_active_parameters() const { return CountParameters(*this, moe.top_k); }

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view origin) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": not valid JSON"));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": expected a JSON object"));
  ConfigReader r(root, origin);
  ModelConfig c;

  if (!r.Has("architectures") || !root.at("architectures").is_array() ||
      root.at("architectures").empty() || !root.at("architectures")[0].is_string()) {
    return r.Error("architectures", "missing or not a list of names");
  }
  c.architecture_name = root.at("architectures")[0].get<std::string>();
  bool known = false;
  for (Architecture a : kArchitectures) {
    if (ArchitectureName(a) == c.architecture_name) {
      c.architecture = a;
      known = true;
    }
  }
  if (!known) {
    return r.Error("architectures", absl::StrCat("unsupported architecture \"", c.architecture_name,
                                                 "\" (supported: ", SupportedArchitectures(), ")"));
  }

  KVS_ASSIGN_OR_RETURN(int64_t hidden, r.Int("hidden_size", std::nullopt));
  KVS_ASSIGN_OR_RETURN(int64_t inter, r.Int("intermediate_size", std::nullopt));
  KVS_ASSIGN_OR_RETURN(int64_t layers, r.Int("num_hidden_layers", std::nullopt));
  KVS_ASSIGN_OR_RETURN(int64_t heads, r.Int("num_attention_heads", std::nullopt));
  KVS_ASSIGN_OR_RETURN(int64_t kv_heads, r.Int("num_key_value_heads", heads));
  KVS_ASSIGN_OR_RETURN(int64_t vocab, r.Int("vocab_size", std::nullopt));
  KVS_ASSIGN_OR_RETURN(c.hidden_size, ToInt(hidden, r, "hidden_size"));
  KVS_ASSIGN_OR_RETURN(c.intermediate_size, ToInt(inter, r, "intermediate_size"));
  KVS_ASSIGN_OR_RETURN(c.num_layers, ToInt(layers, r, "num_hidden_layers"));
  KVS_ASSIGN_OR_RETURN(c.num_heads, ToInt(heads, r, "num_attention_heads"));
  KVS_ASSIGN_OR_RETURN(c.num_kv_heads, ToInt(kv_heads, r, "num_key_value_heads"));
  KVS_ASSIGN_OR_RETURN(c.vocab_size, ToInt(vocab, r, "vocab_size"));
  if (c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads", absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ",
                                                       c.num_heads));
  }
  // Gemma's configs default head_dim to 256 rather than hidden / heads.
  const bool gemma = IsGemma(c.architecture);
  if (!r.Has("head_dim") && !gemma && c.hidden_size % c.num_heads != 0) {
    return r.Error("hidden_size", absl::StrCat(c.hidden_size, " is not a multiple of num_attention_heads ",
                                               c.num_heads, " and head_dim is not given"));
  }
  KVS_ASSIGN_OR_RETURN(int64_t head_dim, r.Int("head_dim", gemma ? 256 : c.hidden_size / c.num_heads));
  KVS_ASSIGN_OR_RETURN(c.head_dim, ToInt(head_dim, r, "head_dim"));
  if (c.head_dim % 2 != 0) return r.Error("head_dim", absl::StrCat("must be even for RoPE, got ", c.head_dim));
  // Partial rotary embeddings (Phi-4-mini): the first int(head_dim * factor) dims rotate, as
  // Hugging Face truncates. The compression policies' frequency analysis covers every dim of
  // a head, so such a model serves policy full only (compression/policy_factory.cc).
  KVS_ASSIGN_OR_RETURN(double prf, r.Number("partial_rotary_factor", 1.0));
  if (!(prf > 0.0 && prf <= 1.0)) return r.Error("partial_rotary_factor", absl::StrCat("must be in (0, 1], got ", prf));
  c.rotary_dim = static_cast<int>(static_cast<double>(c.head_dim) * prf);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
    return r.Error("partial_rotary_factor", absl::StrCat("gives ", c.rotary_dim, " rotary dims; need an even number >= 2"));
  }

  KVS_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  if (!(eps > 0)) return r.Error("rms_norm_eps", "must be > 0");
  c.rms_norm_eps = static_cast<float>(eps);
  KVS_ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 10000.0));
  if (!(c.rope_theta > 1.0)) return r.Error("rope_theta", "must be > 1");
  KVS_ASSIGN_OR_RETURN(c.max_position_embeddings,
                       r.Int("max_position_embeddings", DefaultMaxPositions(c.architecture)));
  KVS_RETURN_IF_ERROR(ParseRopeScaling(root, origin, c));
  c.served_context = c.max_position_embeddings;
  if (c.rope_scaling.kind == RopeScalingKind::kDynamic) {
    c.served_context = static_cast<int64_t>(std::floor(static_cast<double>(c.max_position_embeddings) *
                                                       c.rope_scaling.factor));
  }
  KVS_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", gemma));
  KVS_RETURN_IF_ERROR(ParseArchitecture(r, c));
  KVS_RETURN_IF_ERROR(ParseLayerWindows(root, r, c));
  KVS_RETURN_IF_ERROR(ParseMoe(root, r, c));
  KVS_RETURN_IF_ERROR(ParseTokenIds(root, origin, c));
  return c;
}

std::vector<float> RopeInvFreq(const ModelConfig& config) {
  return ComputeRopeTable(config, config.rope_theta, /*scaled=*/true).inv_freq;
}

}  // namespace kvserve::model
