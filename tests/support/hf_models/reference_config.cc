#include "tests/support/hf_models/reference_config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/safetensors_writer.h"

namespace kvserve::testing::hf {
namespace {

using nlohmann::json;

absl::Status Error(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: \"", field, "\": ", why));
}

// Fields with no effect on the logits of a causal forward (dropouts, init, bookkeeping).
const std::set<std::string>& InertFields() {
  static const std::set<std::string> k = {"architectures",        "model_type",
                                          "torch_dtype",          "dtype",
                                          "transformers_version", "_name_or_path",
                                          "bos_token_id",         "eos_token_id",
                                          "pad_token_id",         "attention_dropout",
                                          "initializer_range",    "use_cache",
                                          "output_router_logits", "router_aux_loss_coef",
                                          "embd_pdrop",           "resid_pdrop",
                                          "cache_implementation", "pretraining_tp",
                                          "router_jitter_noise",  "initial_context_length"};
  return k;
}

std::set<std::string> KnownFields(Arch a) {
  std::set<std::string> k = {"hidden_size",         "intermediate_size",
                             "num_hidden_layers",   "num_attention_heads",
                             "num_key_value_heads", "vocab_size",
                             "rms_norm_eps",        "rope_theta",
                             "rope_scaling",        "max_position_embeddings",
                             "tie_word_embeddings", "hidden_act",
                             "layer_types"};
  auto add = [&k](std::initializer_list<const char*> names) {
    for (const char* n : names) k.insert(n);
  };
  switch (a) {
    case Arch::kLlama:
      add({"head_dim", "attention_bias", "mlp_bias"});
      break;
    case Arch::kQwen2:
      add({"sliding_window", "use_sliding_window", "max_window_layers"});
      break;
    case Arch::kQwen3:
      add({"head_dim", "attention_bias", "sliding_window", "use_sliding_window",
           "max_window_layers"});
      break;
    case Arch::kQwen3Moe:
      add({"head_dim", "attention_bias", "sliding_window", "use_sliding_window",
           "max_window_layers", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
           "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"});
      break;
    case Arch::kMistral:
      add({"head_dim", "sliding_window"});
      break;
    case Arch::kGemma2:
    case Arch::kGemma3:
      add({"head_dim", "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
           "final_logit_softcapping", "sliding_window", "attention_bias"});
      if (a == Arch::kGemma3) add({"sliding_window_pattern", "rope_local_base_freq"});
      break;
    case Arch::kPhi3:
      add({"original_max_position_embeddings", "partial_rotary_factor", "sliding_window",
           "attention_bias"});
      break;
    case Arch::kMixtral:
      add({"head_dim", "num_local_experts", "num_experts_per_tok", "sliding_window"});
      break;
    case Arch::kGptOss:
      add({"head_dim", "attention_bias", "num_local_experts", "num_experts_per_tok",
           "experts_per_token", "swiglu_limit", "sliding_window", "quantization_config"});
      break;
  }
  return k;
}

std::optional<Arch> ArchFromName(const std::string& name) {
  for (Arch a : {Arch::kLlama, Arch::kQwen2, Arch::kQwen3, Arch::kMistral, Arch::kGemma2,
                 Arch::kGemma3, Arch::kPhi3, Arch::kMixtral, Arch::kQwen3Moe, Arch::kGptOss}) {
    if (ArchitectureName(a) == name) return a;
  }
  return std::nullopt;
}

// Typed accessors: absent or null gives the default; a wrong type is an error.
struct Reader {
  const json& j;
  bool Has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
  absl::StatusOr<double> Num(const char* k, std::optional<double> def) const {
    if (!Has(k)) {
      if (def) return *def;
      return Error(k, "required");
    }
    if (!j.at(k).is_number()) return Error(k, "expected a number");
    return j.at(k).get<double>();
  }
  absl::StatusOr<int64_t> Int(const char* k, std::optional<int64_t> def) const {
    if (!Has(k)) {
      if (def) return *def;
      return Error(k, "required");
    }
    if (!j.at(k).is_number_integer()) return Error(k, "expected an integer");
    return j.at(k).get<int64_t>();
  }
  absl::StatusOr<bool> Bool(const char* k, bool def) const {
    if (!Has(k)) return def;
    if (!j.at(k).is_boolean()) return Error(k, "expected a boolean");
    return j.at(k).get<bool>();
  }
  absl::StatusOr<std::string> Str(const char* k, std::string def) const {
    if (!Has(k)) return def;
    if (!j.at(k).is_string()) return Error(k, "expected a string");
    return j.at(k).get<std::string>();
  }
};

// Assigns the value of a StatusOr expression to an existing lvalue or returns its error.
#define REF_ASSIGN(lhs, expr)                     \
  do {                                            \
    auto ref_tmp_ = (expr);                       \
    if (!ref_tmp_.ok()) return ref_tmp_.status(); \
    lhs = std::move(*ref_tmp_);                   \
  } while (0)

absl::StatusOr<RopeParams> ParseRope(const json& root, Arch arch, double theta, int rotary_dim,
                                     int64_t max_pos) {
  RopeParams p;
  p.theta = theta;
  p.rotary_dim = rotary_dim;
  p.max_position_embeddings = max_pos;
  if (!root.contains("rope_scaling") || root.at("rope_scaling").is_null()) return p;
  const json& rs = root.at("rope_scaling");
  if (!rs.is_object()) return Error("rope_scaling", "expected an object or null");
  Reader r{rs};
  std::string type;
  if (rs.contains("rope_type")) {
    REF_ASSIGN(type, r.Str("rope_type", ""));
  } else {
    REF_ASSIGN(type, r.Str("type", ""));
  }
  if (type == "su") type = "longrope";  // the pre-release name of Phi-3's scaling
  std::set<std::string> allowed = {"rope_type", "type"};
  auto allow = [&allowed](std::initializer_list<const char*> names) {
    for (const char* n : names) allowed.insert(n);
  };
  p.type = type;
  if (type == "default") {
  } else if (type == "linear" || type == "dynamic") {
    allow({"factor"});
    REF_ASSIGN(p.factor, r.Num("factor", std::nullopt));
  } else if (type == "llama3") {
    allow({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    REF_ASSIGN(p.factor, r.Num("factor", std::nullopt));
    REF_ASSIGN(p.low_freq_factor, r.Num("low_freq_factor", std::nullopt));
    REF_ASSIGN(p.high_freq_factor, r.Num("high_freq_factor", std::nullopt));
    REF_ASSIGN(p.original_max, r.Int("original_max_position_embeddings", std::nullopt));
  } else if (type == "yarn") {
    allow({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
           "attention_factor", "mscale", "mscale_all_dim", "truncate"});
    REF_ASSIGN(p.original_max, r.Int("original_max_position_embeddings", max_pos));
    // transformers v5: an absent factor is the context ratio.
    REF_ASSIGN(p.factor,
               r.Num("factor", static_cast<double>(max_pos) / static_cast<double>(p.original_max)));
    REF_ASSIGN(p.beta_fast, r.Num("beta_fast", 32.0));
    REF_ASSIGN(p.beta_slow, r.Num("beta_slow", 1.0));
    REF_ASSIGN(p.truncate, r.Bool("truncate", true));
    if (r.Has("attention_factor")) {
      REF_ASSIGN(p.attention_factor, r.Num("attention_factor", std::nullopt));
    }
    if (r.Has("mscale")) {
      REF_ASSIGN(p.mscale, r.Num("mscale", std::nullopt));
    }
    if (r.Has("mscale_all_dim")) {
      REF_ASSIGN(p.mscale_all_dim, r.Num("mscale_all_dim", std::nullopt));
    }
  } else if (type == "longrope") {
    allow({"short_factor", "long_factor", "factor", "attention_factor",
           "original_max_position_embeddings"});
    for (const char* k : {"short_factor", "long_factor"}) {
      if (!rs.contains(k) || !rs.at(k).is_array())
        return Error(absl::StrCat("rope_scaling.", k), "required list");
      std::vector<double> v;
      for (const json& x : rs.at(k)) {
        if (!x.is_number()) return Error(absl::StrCat("rope_scaling.", k), "expected numbers");
        v.push_back(x.get<double>());
      }
      if (static_cast<int>(v.size()) != rotary_dim / 2) {
        return Error(absl::StrCat("rope_scaling.", k),
                     absl::StrCat(v.size(), " entries, rotary_dim / 2 is ", rotary_dim / 2));
      }
      (std::string(k) == "short_factor" ? p.short_factor : p.long_factor) = std::move(v);
    }
    // Phi-3 keeps L0 at the top level; newer configs may nest it.
    Reader top{root};
    if (r.Has("original_max_position_embeddings")) {
      REF_ASSIGN(p.original_max, r.Int("original_max_position_embeddings", std::nullopt));
    } else {
      REF_ASSIGN(p.original_max, top.Int("original_max_position_embeddings", std::nullopt));
    }
    REF_ASSIGN(p.factor,
               r.Num("factor", static_cast<double>(max_pos) / static_cast<double>(p.original_max)));
    if (r.Has("attention_factor")) {
      REF_ASSIGN(p.attention_factor, r.Num("attention_factor", std::nullopt));
    }
  } else {
    return Error("rope_scaling", absl::StrCat("unknown rope type \"", type, "\""));
  }
  for (const auto& [k, v] : rs.items()) {
    if (!allowed.count(k))
      return Error(absl::StrCat("rope_scaling.", k), absl::StrCat("unknown field for ", type));
  }
  if (p.original_max < 0 ||
      (type != "default" && type != "linear" && type != "dynamic" && p.original_max <= 0)) {
    return Error("original_max_position_embeddings", "must be > 0");
  }
  (void)arch;
  return p;
}

double RoundToDtype(double x, const std::string& dtype) {
  if (dtype == "bfloat16") return F32FromBf16(Bf16FromF32(static_cast<float>(x)));
  return static_cast<float>(x);
}

}  // namespace

absl::StatusOr<ReferenceConfig> ParseReferenceConfig(std::string_view text) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Error("", "not a JSON object");
  Reader r{root};
  ReferenceConfig c;
  if (!root.contains("architectures") || !root.at("architectures").is_array() ||
      root.at("architectures").size() != 1 || !root.at("architectures")[0].is_string()) {
    return Error("architectures", "expected a list of one name");
  }
  c.architecture = root.at("architectures")[0].get<std::string>();
  const std::optional<Arch> arch = ArchFromName(c.architecture);
  if (!arch)
    return Error("architectures", absl::StrCat("unknown architecture \"", c.architecture, "\""));
  c.arch = *arch;
  std::string model_type;
  REF_ASSIGN(model_type, r.Str("model_type", ""));
  if (model_type != ModelType(c.arch)) {
    return Error("model_type", absl::StrCat("\"", model_type, "\" does not match ", c.architecture,
                                            " (\"", ModelType(c.arch), "\")"));
  }
  const std::set<std::string> known = KnownFields(c.arch);
  for (const auto& [k, v] : root.items()) {
    if (!known.count(k) && !InertFields().count(k)) {
      return Error(k, absl::StrCat("unknown field for ", c.architecture));
    }
  }
  int64_t v = 0;
  REF_ASSIGN(v, r.Int("hidden_size", std::nullopt));
  c.hidden_size = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("intermediate_size", std::nullopt));
  c.intermediate_size = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("num_hidden_layers", std::nullopt));
  c.num_layers = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("num_attention_heads", std::nullopt));
  c.num_heads = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("num_key_value_heads", c.num_heads));
  c.num_kv_heads = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("vocab_size", std::nullopt));
  c.vocab_size = static_cast<int>(v);
  REF_ASSIGN(v, r.Int("head_dim", c.hidden_size / c.num_heads));
  c.head_dim = static_cast<int>(v);
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return Error("num_key_value_heads", "must divide num_attention_heads");
  }
  REF_ASSIGN(c.rms_norm_eps, r.Num("rms_norm_eps", 1e-6));
  REF_ASSIGN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", IsGemma(c.arch)));
  REF_ASSIGN(c.torch_dtype, r.Str("torch_dtype", "float32"));
  if (c.torch_dtype != "float32" && c.torch_dtype != "bfloat16") {
    return Error("torch_dtype", absl::StrCat("unsupported \"", c.torch_dtype, "\""));
  }
  c.gemma = IsGemma(c.arch);
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe || c.arch == Arch::kGemma3;
  c.sinks = c.arch == Arch::kGptOss;

  // Activation: Gemma reads hidden_activation (hidden_act is legacy there).
  std::string act;
  if (c.gemma) {
    REF_ASSIGN(act, r.Str("hidden_activation", "gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh")
      return Error("hidden_activation", absl::StrCat("unsupported \"", act, "\""));
  } else {
    REF_ASSIGN(act, r.Str("hidden_act", "silu"));
    if (act != "silu") return Error("hidden_act", absl::StrCat("unsupported \"", act, "\""));
  }
  c.activation = act;
  bool flag = false;
  REF_ASSIGN(flag, r.Bool("mlp_bias", false));
  if (flag) return Error("mlp_bias", "MLP biases are not modelled");

  // Biases.
  bool attention_bias = false;
  REF_ASSIGN(attention_bias, r.Bool("attention_bias", c.arch == Arch::kGptOss));
  switch (c.arch) {
    case Arch::kQwen2:
      c.qkv_bias = true;
      break;
    case Arch::kLlama:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
    case Arch::kGptOss:
      c.qkv_bias = c.o_bias = attention_bias;
      break;
    default:
      if (attention_bias)
        return Error("attention_bias", absl::StrCat("true is not modelled for ", c.architecture));
  }

  // Attention scale and soft-capping.
  double scalar = c.head_dim;
  if (c.gemma) {
    REF_ASSIGN(scalar, r.Num("query_pre_attn_scalar", std::nullopt));
  }
  c.attn_scaling = 1.0 / std::sqrt(scalar);
  if (c.gemma && r.Has("attn_logit_softcapping")) {
    REF_ASSIGN(c.attn_softcap, r.Num("attn_logit_softcapping", std::nullopt));
  }
  if (c.gemma && r.Has("final_logit_softcapping")) {
    REF_ASSIGN(c.final_softcap, r.Num("final_logit_softcapping", std::nullopt));
  }
  // Gemma: the normaliser is a tensor in the activation dtype (HF Gemma2Model.forward;
  // Gemma3TextScaledWordEmbedding casts embed_scale to the weight dtype).
  if (c.gemma)
    c.embed_scale = RoundToDtype(std::sqrt(static_cast<double>(c.hidden_size)), c.torch_dtype);

  // MoE.
  if (c.arch == Arch::kMixtral || c.arch == Arch::kGptOss) {
    REF_ASSIGN(v, r.Int("num_local_experts", std::nullopt));
    c.num_experts = static_cast<int>(v);
  } else if (c.arch == Arch::kQwen3Moe) {
    REF_ASSIGN(v, r.Int("num_experts", std::nullopt));
    c.num_experts = static_cast<int>(v);
    REF_ASSIGN(v, r.Int("moe_intermediate_size", std::nullopt));
    c.moe_intermediate_size = static_cast<int>(v);
    REF_ASSIGN(c.norm_topk_prob, r.Bool("norm_topk_prob", false));
  }
  if (c.num_experts > 0) {
    REF_ASSIGN(v, r.Int("num_experts_per_tok", std::nullopt));
    c.top_k = static_cast<int>(v);
    if (c.top_k <= 0 || c.top_k > c.num_experts)
      return Error("num_experts_per_tok", "must be in [1, experts]");
  }
  if (c.arch == Arch::kGptOss) {
    REF_ASSIGN(c.swiglu_limit, r.Num("swiglu_limit", 7.0));
    if (r.Has("experts_per_token")) {
      REF_ASSIGN(v, r.Int("experts_per_token", std::nullopt));
      if (v != c.top_k) return Error("experts_per_token", "differs from num_experts_per_tok");
    }
    if (r.Has("quantization_config")) {
      const json& q = root.at("quantization_config");
      if (!q.is_object() || q.value("quant_method", "") != "mxfp4") {
        return Error("quantization_config", "only quant_method mxfp4 is modelled");
      }
      c.mxfp4 = true;
    }
  }

  // Per-layer attention type.
  std::optional<int64_t> window;
  if (root.contains("sliding_window") && !root.at("sliding_window").is_null()) {
    REF_ASSIGN(v, r.Int("sliding_window", std::nullopt));
    if (v <= 0) return Error("sliding_window", "must be > 0");
    window = v;
  }
  std::vector<std::string> types;
  if (r.Has("layer_types")) {
    if (!root.at("layer_types").is_array() ||
        static_cast<int>(root.at("layer_types").size()) != c.num_layers) {
      return Error("layer_types", "expected one entry per layer");
    }
    for (const json& t : root.at("layer_types")) {
      if (!t.is_string() || (t != "sliding_attention" && t != "full_attention")) {
        return Error("layer_types", absl::StrCat("unknown layer type ", t.dump()));
      }
      types.push_back(t.get<std::string>());
    }
  } else {
    bool use_sw = true;
    int64_t max_window_layers = 0;
    int64_t pattern = 6;
    if (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) {
      REF_ASSIGN(use_sw, r.Bool("use_sliding_window", false));
      REF_ASSIGN(max_window_layers, r.Int("max_window_layers", 0));
    }
    if (c.arch == Arch::kGemma3) {
      REF_ASSIGN(pattern, r.Int("sliding_window_pattern", 6));
    }
    for (int i = 0; i < c.num_layers; ++i) {
      bool sliding = window.has_value();
      if (c.arch == Arch::kGemma2 || c.arch == Arch::kGptOss) sliding = sliding && (i + 1) % 2 != 0;
      if (c.arch == Arch::kGemma3) sliding = sliding && (i + 1) % pattern != 0;
      if (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) {
        sliding = sliding && use_sw && i >= max_window_layers;
      }
      types.push_back(sliding ? "sliding_attention" : "full_attention");
    }
  }

  // RoPE.
  double theta = 10000.0, prf = 1.0;
  int64_t max_pos = 0;
  REF_ASSIGN(theta, r.Num("rope_theta", 10000.0));
  REF_ASSIGN(prf, r.Num("partial_rotary_factor", 1.0));
  REF_ASSIGN(max_pos, r.Int("max_position_embeddings", std::nullopt));
  const int rotary_dim = static_cast<int>(c.head_dim * prf);
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > c.head_dim) {
    return Error("partial_rotary_factor",
                 absl::StrCat("rotary dim ", rotary_dim, " must be even and <= head_dim"));
  }
  absl::StatusOr<RopeParams> global_rope = ParseRope(root, c.arch, theta, rotary_dim, max_pos);
  if (!global_rope.ok()) return global_rope.status();
  RopeParams local_rope = *global_rope;
  if (c.arch == Arch::kGemma3) {
    // Gemma 3 local layers: plain RoPE on rope_local_base_freq, no scaling.
    local_rope = RopeParams{};
    REF_ASSIGN(local_rope.theta, r.Num("rope_local_base_freq", 10000.0));
    local_rope.rotary_dim = rotary_dim;
    local_rope.max_position_embeddings = max_pos;
  }

  // Dense or sparse feed-forward per layer (Qwen3-MoE decoder_sparse_step / mlp_only_layers).
  int64_t sparse_step = 1;
  std::set<int64_t> mlp_only;
  if (c.arch == Arch::kQwen3Moe) {
    REF_ASSIGN(sparse_step, r.Int("decoder_sparse_step", 1));
    if (sparse_step <= 0) return Error("decoder_sparse_step", "must be > 0");
    if (r.Has("mlp_only_layers")) {
      if (!root.at("mlp_only_layers").is_array())
        return Error("mlp_only_layers", "expected a list");
      for (const json& x : root.at("mlp_only_layers")) {
        if (!x.is_number_integer()) return Error("mlp_only_layers", "expected integers");
        mlp_only.insert(x.get<int64_t>());
      }
    }
  }
  for (int i = 0; i < c.num_layers; ++i) {
    LayerConfig l;
    l.sliding = types[static_cast<size_t>(i)] == "sliding_attention";
    if (l.sliding && !window)
      return Error("layer_types", "sliding_attention without a sliding_window");
    l.window = l.sliding ? *window : 0;
    l.rope = (c.arch == Arch::kGemma3 && l.sliding) ? local_rope : *global_rope;
    l.sparse_moe = c.num_experts > 0 && (c.arch != Arch::kQwen3Moe ||
                                         (!mlp_only.count(i) && (i + 1) % sparse_step == 0));
    c.layers.push_back(std::move(l));
  }
  return c;
}

absl::StatusOr<ReferenceConfig> LoadReferenceConfig(const std::string& dir) {
  std::ifstream in(dir + "/config.json", std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", dir, "/config.json"));
  std::ostringstream s;
  s << in.rdbuf();
  auto c = ParseReferenceConfig(s.str());
  if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat(dir, "/", c.status().message()));
  return c;
}

}  // namespace kvserve::testing::hf
