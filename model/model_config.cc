#include "model/model_config.h"

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string_view origin) : j_(j), origin_(origin) {}

  absl::Status Error(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(base::AsAbsl(origin_), ": ", base::AsAbsl(field), ": ", base::AsAbsl(what)));
  }
  bool Has(const char* field) const { return j_.contains(field) && !j_.at(field).is_null(); }

  // Integer field; `fallback` empty means required.
  absl::StatusOr<int64_t> Int(const char* field, std::optional<int64_t> fallback,
                              int64_t min_value = 1) const {
    if (!Has(field)) {
      if (fallback) return *fallback;
      return Error(field, "missing (required)");
    }
    const json& v = j_.at(field);
    if (!v.is_number_integer()) return Error(field, absl::StrCat("expected an integer, got ", v.dump()));
    const int64_t x = v.get<int64_t>();
    if (x < min_value) return Error(field, absl::StrCat("must be >= ", min_value, ", got ", x));
    if (x > (int64_t{1} << 40)) return Error(field, absl::StrCat("implausibly large: ", x));
    return x;
  }
  absl::StatusOr<double> Number(const char* field, double fallback) const {
    if (!Has(field)) return fallback;
    const json& v = j_.at(field);
    if (!v.is_number()) return Error(field, absl::StrCat("expected a number, got ", v.dump()));
    const double x = v.get<double>();
    if (!std::isfinite(x)) return Error(field, "must be finite");
    return x;
  }
  absl::StatusOr<bool> Bool(const char* field, bool fallback) const {
    if (!Has(field)) return fallback;
    const json& v = j_.at(field);
    if (!v.is_boolean()) return Error(field, absl::StrCat("expected true or false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const char* field, std::string fallback) const {
    if (!Has(field)) return fallback;
    const json& v = j_.at(field);
    if (!v.is_string()) return Error(field, absl::StrCat("expected a string, got ", v.dump()));
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string_view origin_;
};

absl::StatusOr<int> ToInt(int64_t x, const Reader& r, const char* field) {
  if (x > (int64_t{1} << 30)) return r.Error(field, absl::StrCat("too large: ", x));
  return static_cast<int>(x);
}

absl::Status ParseRopeScaling(const json& root, std::string_view origin, ModelConfig& c) {
  if (!root.contains("rope_scaling") || root.at("rope_scaling").is_null()) return absl::OkStatus();
  const json& rs = root.at("rope_scaling");
  if (!rs.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": rope_scaling: expected an object or null"));
  }
  Reader r(rs, origin);
  // Newer configs say rope_type, older ones type; both mean the same.
  std::string type;
  if (rs.contains("rope_type")) {
    KVS_ASSIGN_OR_RETURN(type, r.String("rope_type", ""));
  } else {
    KVS_ASSIGN_OR_RETURN(type, r.String("type", ""));
  }
  auto err = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": rope_scaling: ", base::AsAbsl(what)));
  };
  if (type == "default" || type.empty()) {
    if (type.empty()) return err("missing rope_type (supported: linear, llama3)");
    return absl::OkStatus();
  }
  KVS_ASSIGN_OR_RETURN(double factor, r.Number("factor", 0.0));
  if (!(factor >= 1.0)) return err(absl::StrCat("factor must be >= 1, got ", factor));
  c.rope_scaling.factor = factor;
  if (type == "linear") {
    c.rope_scaling.kind = RopeScalingKind::kLinear;
    return absl::OkStatus();
  }
  if (type == "llama3") {
    c.rope_scaling.kind = RopeScalingKind::kLlama3;
    KVS_ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, r.Number("low_freq_factor", 1.0));
    KVS_ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor, r.Number("high_freq_factor", 4.0));
    KVS_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                         r.Int("original_max_position_embeddings", 8192));
    if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor) ||
        c.rope_scaling.low_freq_factor <= 0) {
      return err("llama3 needs 0 < low_freq_factor < high_freq_factor");
    }
    return absl::OkStatus();
  }
  return err(absl::StrCat("unsupported rope type \"", type, "\" (supported: linear, llama3)"));
}

absl::Status ParseTokenIds(const json& root, std::string_view origin, ModelConfig& c) {
  Reader r(root, origin);
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

}  // namespace

std::string_view ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
  }
  return "?";
}

int64_t ModelConfig::num_parameters() const {
  const int64_t d = hidden_size;
  const int64_t per_layer = 2 * d + d * (q_size() + 2 * kv_size()) + q_size() * d +
                            3 * d * intermediate_size + (qkv_bias ? q_size() + 2 * kv_size() : 0) +
                            (o_bias ? d : 0);
  return num_layers * per_layer + d + vocab_size * d * (tie_word_embeddings ? 1 : 2);
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view origin) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": not valid JSON"));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": expected a JSON object"));
  Reader r(root, origin);
  ModelConfig c;

  if (!r.Has("architectures") || !root.at("architectures").is_array() ||
      root.at("architectures").empty() || !root.at("architectures")[0].is_string()) {
    return r.Error("architectures", "missing or not a list of names");
  }
  c.architecture_name = root.at("architectures")[0].get<std::string>();
  if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "MistralForCausalLM") {
    c.architecture = Architecture::kMistral;
  } else if (c.architecture_name == "Qwen2ForCausalLM") {
    c.architecture = Architecture::kQwen2;
  } else {
    return r.Error("architectures", absl::StrCat("unsupported architecture \"", c.architecture_name,
                                                 "\" (supported: LlamaForCausalLM, "
                                                 "MistralForCausalLM, Qwen2ForCausalLM)"));
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
  if (!r.Has("head_dim") && c.hidden_size % c.num_heads != 0) {
    return r.Error("hidden_size", absl::StrCat(c.hidden_size, " is not a multiple of num_attention_heads ",
                                               c.num_heads, " and head_dim is not given"));
  }
  KVS_ASSIGN_OR_RETURN(int64_t head_dim, r.Int("head_dim", c.hidden_size / c.num_heads));
  KVS_ASSIGN_OR_RETURN(c.head_dim, ToInt(head_dim, r, "head_dim"));
  if (c.head_dim % 2 != 0) return r.Error("head_dim", absl::StrCat("must be even for RoPE, got ", c.head_dim));

  KVS_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") return r.Error("hidden_act", absl::StrCat("unsupported \"", act, "\" (supported: silu)"));
  KVS_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  if (!(eps > 0)) return r.Error("rms_norm_eps", "must be > 0");
  c.rms_norm_eps = static_cast<float>(eps);
  KVS_ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 10000.0));
  if (!(c.rope_theta > 1.0)) return r.Error("rope_theta", "must be > 1");
  KVS_RETURN_IF_ERROR(ParseRopeScaling(root, origin, c));
  if (r.Has("partial_rotary_factor")) {
    KVS_ASSIGN_OR_RETURN(double prf, r.Number("partial_rotary_factor", 1.0));
    if (prf != 1.0) return r.Error("partial_rotary_factor", "only 1.0 is supported");
  }
  KVS_ASSIGN_OR_RETURN(c.max_position_embeddings,
                       r.Int("max_position_embeddings", c.architecture == Architecture::kQwen2 ? 32768 : 2048));
  KVS_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));

  KVS_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Error("mlp_bias", "MLP biases are not supported");
  switch (c.architecture) {
    case Architecture::kLlama: {
      KVS_ASSIGN_OR_RETURN(bool bias, r.Bool("attention_bias", false));
      c.qkv_bias = bias;
      c.o_bias = bias;
      break;
    }
    case Architecture::kMistral:
      break;
    case Architecture::kQwen2:
      c.qkv_bias = true;  // Qwen2 hard-wires q/k/v biases; o_proj has none.
      break;
  }
  if (c.architecture != Architecture::kLlama && r.Has("sliding_window")) {
    bool used = true;
    if (c.architecture == Architecture::kQwen2) {
      KVS_ASSIGN_OR_RETURN(used, r.Bool("use_sliding_window", false));
    }
    if (used) {
      KVS_ASSIGN_OR_RETURN(int64_t window, r.Int("sliding_window", std::nullopt));
      c.sliding_window = window;
    }
  }
  KVS_RETURN_IF_ERROR(ParseTokenIds(root, origin, c));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), path);
}

std::vector<float> RopeInvFreq(const ModelConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<float> out(half);
  const RopeScaling& rs = config.rope_scaling;
  for (int f = 0; f < half; ++f) {
    double inv = 1.0 / std::pow(config.rope_theta, 2.0 * f / config.head_dim);
    switch (rs.kind) {
      case RopeScalingKind::kNone:
        break;
      case RopeScalingKind::kLinear:
        inv /= rs.factor;  // positions divided by factor
        break;
      case RopeScalingKind::kLlama3: {
        const double old_len = static_cast<double>(rs.original_max_position_embeddings);
        const double low_freq_wavelen = old_len / rs.low_freq_factor;
        const double high_freq_wavelen = old_len / rs.high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / inv;
        if (wavelen > low_freq_wavelen) {
          inv /= rs.factor;  // long wavelengths: fully interpolated
        } else if (wavelen >= high_freq_wavelen) {
          // Medium band: blend between interpolated and original.
          const double smooth = (old_len / wavelen - rs.low_freq_factor) /
                                (rs.high_freq_factor - rs.low_freq_factor);
          inv = (1.0 - smooth) * inv / rs.factor + smooth * inv;
        }
        break;
      }
    }
    out[f] = static_cast<float>(inv);
  }
  return out;
}

}  // namespace kvserve::model
