#include "model/hf_fp8_config.h"

#include <regex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using json = nlohmann::json;

absl::Status Refuse(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("FP8: ", what));
}

int64_t Int(const json& j, const char* key, int64_t fallback) {
  return j.contains(key) && j.at(key).is_number_integer() ? j.at(key).get<int64_t>() : fallback;
}

std::string Str(const json& j, const char* key, std::string fallback) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : fallback;
}

absl::StatusOr<std::vector<std::string>> Names(const json& q, const char* key) {
  std::vector<std::string> v;
  if (!q.contains(key) || q.at(key).is_null()) return v;
  if (!q.at(key).is_array()) return Refuse(absl::StrCat(key, " must be a list of module names"));
  for (const json& n : q.at(key)) {
    if (!n.is_string()) return Refuse(absl::StrCat(key, " must be a list of module names"));
    v.push_back(n.get<std::string>());
    if (v.back().starts_with("re:")) {
      // Module patterns are short; a bound keeps the regex compiler's recursion shallow.
      if (v.back().size() > 256)
        return Refuse(absl::StrCat(key, ": a pattern over 256 characters"));
      try {
        std::regex check(v.back().substr(3));
      } catch (const std::regex_error&) {
        return Refuse(absl::StrCat(key, ": \"", v.back(), "\" is not a valid pattern"));
      }
    }
  }
  return v;
}

absl::Status CheckBlockCols(int64_t cols, const std::string& what) {
  if (cols <= 0 || cols % 128 != 0) {
    return Refuse(absl::StrCat(what, ": a scale every ", cols,
                               " input columns is not supported (multiples of 128 are)"));
  }
  return absl::OkStatus();
}

// quant_method "fp8".
absl::StatusOr<HfFp8Config> ParseFp8(const json& q) {
  HfFp8Config c;
  c.method = Fp8Method::kFp8;
  const std::string fmt = Str(q, "fmt", "e4m3");
  if (fmt != "e4m3")
    return Refuse(absl::StrCat("fmt \"", fmt, "\" weights are not supported (e4m3 are)"));
  const std::string scheme = Str(q, "activation_scheme", "dynamic");
  const bool blocks = q.contains("weight_block_size") && !q.at("weight_block_size").is_null();
  if (scheme != "dynamic" && scheme != "static") {
    return Refuse(absl::StrCat("activation_scheme \"", scheme, "\" is not supported"));
  }
  if (blocks) {
    const json& b = q.at("weight_block_size");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0) {
      return Refuse(absl::StrCat("weight_block_size ", b.dump(), " is not [rows, columns]"));
    }
    c.block_rows = b[0].get<int64_t>();
    c.block_cols = b[1].get<int64_t>();
    if (auto s = CheckBlockCols(c.block_cols, absl::StrCat("weight_block_size ", b.dump()));
        !s.ok())
      return s;
    if (scheme == "static") {
      return Refuse(
          "activation_scheme \"static\" with weight_block_size: block-scaled weights define "
          "dynamic per-group activation scales only");
    }
  } else {
    c.scale_suffix = "weight_scale";  // one per tensor
  }
  c.activations = scheme == "static" ? "static per-tensor (input_scale unused; run in fp32)"
                                     : "dynamic (run in fp32)";
  auto a = Names(q, "modules_to_not_convert");
  if (!a.ok()) return a.status();
  auto b = Names(q, "ignored_layers");
  if (!b.ok()) return b.status();
  c.ignore = *a;
  c.ignore.insert(c.ignore.end(), b->begin(), b->end());
  return c;
}

// One compressed-tensors QuantizationArgs of weights: the scale granularity.
absl::Status ParseCtWeights(const json& w, const std::string& group, HfFp8Config& c) {
  const std::string where = absl::StrCat("config_groups.", group, ".weights");
  const int64_t bits = Int(w, "num_bits", 8);
  const std::string type = Str(w, "type", "int");
  if (type != "float" || bits != 8) {
    return Refuse(absl::StrCat(where, ": ", type, " ", bits,
                               "-bit weights next to FP8 ones are not supported"));
  }
  if (w.contains("symmetric") && w.at("symmetric").is_boolean() && !w.at("symmetric").get<bool>())
    return Refuse(absl::StrCat(where, ": asymmetric float weights are not supported"));
  if (w.contains("dynamic") && w.at("dynamic").is_boolean() && w.at("dynamic").get<bool>())
    return Refuse(absl::StrCat(where, ": dynamic weight scales are not supported"));
  const std::string strategy = Str(w, "strategy", "tensor");
  int64_t rows = 0, cols = 0;
  if (strategy == "tensor") {
  } else if (strategy == "channel") {
    rows = 1;
  } else if (strategy == "group") {
    rows = 1;
    cols = Int(w, "group_size", 0);
    if (auto s = CheckBlockCols(cols, absl::StrCat(where, ": group_size ", cols)); !s.ok())
      return s;
  } else if (strategy == "block") {
    const json& b = w.contains("block_structure") ? w.at("block_structure") : json();
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0) {
      return Refuse(absl::StrCat(where, ": block_structure ", b.dump(), " is not [rows, columns]"));
    }
    rows = b[0].get<int64_t>();
    cols = b[1].get<int64_t>();
    if (auto s = CheckBlockCols(cols, absl::StrCat(where, ": block_structure ", b.dump())); !s.ok())
      return s;
  } else {
    return Refuse(
        absl::StrCat(where, ": strategy \"", strategy, "\" is not supported for FP8 weights"));
  }
  if (!c.activations.empty() && (rows != c.block_rows || cols != c.block_cols)) {
    return Refuse("config groups with different FP8 weight strategies are not supported");
  }
  c.block_rows = rows;
  c.block_cols = cols;
  return absl::OkStatus();
}

std::string CtActivations(const json& g, const std::string& group, absl::Status& status) {
  if (!g.contains("input_activations") || g.at("input_activations").is_null())
    return "none (weight-only)";
  const json& a = g.at("input_activations");
  const std::string type = Str(a, "type", "int");
  const int64_t bits = Int(a, "num_bits", 8);
  const std::string strategy = Str(a, "strategy", "tensor");
  const bool dynamic =
      a.contains("dynamic") && a.at("dynamic").is_boolean() && a.at("dynamic").get<bool>();
  if (type != "float" || bits != 8) {
    status = Refuse(absl::StrCat("config_groups.", group, ".input_activations: ", type, " ", bits,
                                 "-bit activations are not supported (FP8 or none)"));
    return "";
  }
  if (strategy != "tensor" && strategy != "token" && strategy != "group") {
    status = Refuse(absl::StrCat("config_groups.", group, ".input_activations: strategy \"",
                                 strategy, "\" is not supported"));
    return "";
  }
  return absl::StrCat(dynamic ? "dynamic per-" : "static per-", strategy,
                      dynamic ? "" : " (input_scale unused)", " (run in fp32)");
}

// quant_method "compressed-tensors": nullopt when no group has float weights.
absl::StatusOr<std::optional<HfFp8Config>> ParseCompressedTensors(const json& q) {
  if (!q.contains("config_groups") || !q.at("config_groups").is_object()) return std::nullopt;
  bool any_float = false;
  for (const auto& [name, g] : q.at("config_groups").items()) {
    if (g.is_object() && g.contains("weights") && g.at("weights").is_object() &&
        Str(g.at("weights"), "type", "int") == "float") {
      any_float = true;
    }
  }
  if (!any_float) return std::nullopt;
  const std::string format = Str(q, "format", "float-quantized");
  if (format != "float-quantized" && format != "naive-quantized") {
    return Refuse(absl::StrCat("compressed-tensors format \"", format,
                               "\" with float weights is not supported (float-quantized and "
                               "naive-quantized FP8 are)"));
  }
  for (const char* key : {"sparsity_config", "transform_config"}) {
    if (q.contains(key) && !q.at(key).is_null())
      return Refuse(absl::StrCat(key, " is not supported"));
  }
  HfFp8Config c;
  c.method = Fp8Method::kCompressedTensors;
  c.scale_suffix = "weight_scale";
  for (const auto& [name, g] : q.at("config_groups").items()) {
    if (!g.is_object() || !g.contains("weights") || !g.at("weights").is_object())
      return Refuse(absl::StrCat("config_groups.", name, ": no weights arguments"));
    if (g.contains("output_activations") && !g.at("output_activations").is_null())
      return Refuse(absl::StrCat("config_groups.", name, ".output_activations are not supported"));
    if (auto s = ParseCtWeights(g.at("weights"), name, c); !s.ok()) return s;
    absl::Status status;
    c.activations = CtActivations(g, name, status);
    if (!status.ok()) return status;
  }
  auto ignore = Names(q, "ignore");
  if (!ignore.ok()) return ignore.status();
  c.ignore = *ignore;
  return std::optional<HfFp8Config>(std::move(c));
}

bool NameMatches(std::string_view module, const std::string& rule) {
  if (rule.starts_with("re:")) {
    try {
      return std::regex_search(std::string(module), std::regex(rule.substr(3)),
                               std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;
    }
  }
  if (module == rule) return true;
  // A prefix ("model.layers.0") or suffix ("lm_head", "mlp.gate") at a '.' boundary.
  if (module.size() > rule.size()) {
    if (module.starts_with(rule) && module[rule.size()] == '.') return true;
    if (module.ends_with(rule) && module[module.size() - rule.size() - 1] == '.') return true;
  }
  return false;
}

}  // namespace

bool HfFp8Config::Ignored(std::string_view module) const {
  for (const std::string& rule : ignore)
    if (NameMatches(module, rule)) return true;
  return false;
}

std::string HfFp8Config::Describe() const {
  std::string scales = block_rows == 0 && block_cols == 0 ? "per-tensor"
                       : block_cols == 0                  ? "per-channel"
                       : block_rows == 1                  ? absl::StrCat("per-group ", block_cols)
                                         : absl::StrCat("block ", block_rows, "x", block_cols);
  return absl::StrCat(method == Fp8Method::kFp8 ? "fp8" : "compressed-tensors fp8", " e4m3 ",
                      scales, " weight scales, activations ", activations);
}

absl::StatusOr<std::optional<HfFp8Config>> ParseHfFp8Config(
    std::string_view quantization_config_json) {
  const json q = json::parse(quantization_config_json, nullptr, /*allow_exceptions=*/false);
  if (!q.is_object()) return std::nullopt;
  const std::string method = Str(q, "quant_method", "");
  if (method == "fp8") {
    auto c = ParseFp8(q);
    if (!c.ok()) return c.status();
    return std::optional<HfFp8Config>(std::move(*c));
  }
  if (method == "compressed-tensors") return ParseCompressedTensors(q);
  return std::nullopt;
}

}  // namespace kvserve::model
