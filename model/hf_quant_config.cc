#include "model/hf_quant_config.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using json = nlohmann::json;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string StringField(const json& o, const char* key, std::string fallback = "") {
  if (!o.is_object() || !o.contains(key) || !o.at(key).is_string()) return fallback;
  return o.at(key).get<std::string>();
}

// The weights QuantizationArgs of every compressed-tensors config group.
std::vector<const json*> CtWeightArgs(const json& q) {
  std::vector<const json*> out;
  if (!q.contains("config_groups") || !q.at("config_groups").is_object()) return out;
  for (const auto& [name, g] : q.at("config_groups").items()) {
    if (g.is_object() && g.contains("weights") && g.at("weights").is_object()) {
      out.push_back(&g.at("weights"));
    }
  }
  return out;
}

class Fields {
 public:
  Fields(const json& q, std::string_view origin) : q_(q), origin_(origin) {}
  absl::Status Error(std::string_view what) const {
    if (origin_.empty()) return absl::InvalidArgumentError(base::AsAbsl(what));
    return absl::InvalidArgumentError(
        absl::StrCat(base::AsAbsl(origin_), ": ", base::AsAbsl(what)));
  }
  absl::StatusOr<int64_t> Int(const json& o, const char* key, int64_t fallback) const {
    if (!o.contains(key) || o.at(key).is_null()) return fallback;
    if (!o.at(key).is_number_integer()) {
      return Error(absl::StrCat(key, ": expected an integer, got ", o.at(key).dump()));
    }
    return o.at(key).get<int64_t>();
  }
  absl::StatusOr<bool> Bool(const json& o, const char* key, bool fallback) const {
    if (!o.contains(key) || o.at(key).is_null()) return fallback;
    if (!o.at(key).is_boolean()) {
      return Error(absl::StrCat(key, ": expected true or false, got ", o.at(key).dump()));
    }
    return o.at(key).get<bool>();
  }
  absl::Status Names(const json& o, const char* key, std::vector<std::string>& out) const {
    if (!o.contains(key) || o.at(key).is_null()) return absl::OkStatus();
    if (!o.at(key).is_array()) return Error(absl::StrCat(key, ": expected a list of module names"));
    for (const json& v : o.at(key)) {
      if (!v.is_string()) return Error(absl::StrCat(key, ": expected names, got ", v.dump()));
      out.push_back(v.get<std::string>());
    }
    return absl::OkStatus();
  }
  // group_size as written: -1 or 0 (per output channel) or a positive multiple of 32.
  absl::Status Group(int64_t g, HfQuantConfig& c) const {
    if (g == -1 || g == 0) {
      c.group_size = 0;
      return absl::OkStatus();
    }
    if (g < 32 || g % 32 != 0 || g > (int64_t{1} << 20)) {
      return Error(absl::StrCat("group_size ", g,
                                " is not supported (supported: a multiple of 32, or -1 for one "
                                "group per output channel)"));
    }
    c.group_size = static_cast<int>(g);
    return absl::OkStatus();
  }
  const json& q() const { return q_; }

 private:
  const json& q_;
  std::string_view origin_;
};

absl::StatusOr<HfQuantConfig> ParseAwq(const Fields& f) {
  const json& q = f.q();
  HfQuantConfig c;
  c.method = HfQuantMethod::kAwq;
  const std::string version = Lower(StringField(q, "version", "gemm"));
  if (version != "gemm") {
    return f.Error(
        absl::StrCat("AWQ version \"", version,
                     "\" is not supported (supported: AWQ GEMM packing, version \"gemm\")"));
  }
  KVS_ASSIGN_OR_RETURN(int64_t bits, f.Int(q, q.contains("w_bit") ? "w_bit" : "bits", 4));
  if (bits != 4) {
    return f.Error(absl::StrCat("AWQ with ", bits, " bits is not supported (supported: 4)"));
  }
  c.bits = 4;
  KVS_ASSIGN_OR_RETURN(int64_t g,
                       f.Int(q, q.contains("q_group_size") ? "q_group_size" : "group_size", 128));
  KVS_RETURN_IF_ERROR(f.Group(g, c));
  KVS_ASSIGN_OR_RETURN(bool zero_point, f.Bool(q, "zero_point", true));
  if (!zero_point) {
    return f.Error(
        "AWQ without zero points (zero_point false) is not supported (supported: "
        "GEMM packing with zero points)");
  }
  KVS_RETURN_IF_ERROR(f.Names(q, "modules_to_not_convert", c.not_converted));
  return c;
}

absl::StatusOr<HfQuantConfig> ParseGptq(const Fields& f) {
  const json& q = f.q();
  HfQuantConfig c;
  c.method = HfQuantMethod::kGptq;
  KVS_ASSIGN_OR_RETURN(int64_t bits, f.Int(q, "bits", 4));
  if (bits != 4 && bits != 8) {
    return f.Error(absl::StrCat("GPTQ with ", bits, " bits is not supported (supported: 4 and 8)"));
  }
  c.bits = static_cast<int>(bits);
  KVS_ASSIGN_OR_RETURN(int64_t g, f.Int(q, "group_size", 128));
  KVS_RETURN_IF_ERROR(f.Group(g, c));
  KVS_ASSIGN_OR_RETURN(c.symmetric, f.Bool(q, "sym", true));
  KVS_ASSIGN_OR_RETURN(c.act_order, f.Bool(q, "desc_act", false));
  // checkpoint_format (transformers / AutoGPTQ) or format (GPTQModel): the packing.
  std::string fmt = Lower(StringField(q, "checkpoint_format", StringField(q, "format", "gptq")));
  if (fmt == "gptq") {
    c.gptq_v1_zeros = true;
  } else if (fmt != "gptq_v2") {
    return f.Error(absl::StrCat("GPTQ checkpoint_format \"", fmt,
                                "\" is not supported (supported: \"gptq\" and \"gptq_v2\")"));
  }
  KVS_RETURN_IF_ERROR(f.Names(q, "modules_to_not_convert", c.not_converted));
  return c;
}

absl::StatusOr<HfQuantConfig> ParseCompressedTensors(const Fields& f) {
  const json& q = f.q();
  HfQuantConfig c;
  c.method = HfQuantMethod::kCompressedTensors;
  const std::string format = StringField(q, "format", "");
  if (format != "pack-quantized" && format != "int-quantized") {
    return f.Error(absl::StrCat("compressed-tensors format \"", format,
                                "\" is not supported (supported: \"pack-quantized\" int4/int8 "
                                "weight-only, \"int-quantized\" int8 W8A8)"));
  }
  c.w8a8 = format == "int-quantized";
  if (q.contains("kv_cache_scheme") && !q.at("kv_cache_scheme").is_null()) {
    return f.Error(
        "compressed-tensors kv_cache_scheme (quantized KV cache scales) is not supported");
  }
  const std::vector<const json*> groups = CtWeightArgs(q);
  if (groups.empty()) return f.Error("compressed-tensors: no config_groups with weights");
  if (!std::all_of(groups.begin(), groups.end(), [&](const json* w) { return *w == *groups[0]; })) {
    return f.Error(
        "compressed-tensors: config_groups with different weight schemes are not "
        "supported (supported: one scheme for every quantized module)");
  }
  const json& w = *groups[0];
  if (StringField(w, "type", "int") != "int") {
    return f.Error(absl::StrCat("compressed-tensors weights of type \"", StringField(w, "type"),
                                "\" are not supported here (supported: int)"));
  }
  KVS_ASSIGN_OR_RETURN(int64_t bits, f.Int(w, "num_bits", 8));
  if (bits != 4 && bits != 8) {
    return f.Error(absl::StrCat("compressed-tensors int", bits,
                                " weights are not supported (supported: int4 and int8)"));
  }
  c.bits = static_cast<int>(bits);
  KVS_ASSIGN_OR_RETURN(c.symmetric, f.Bool(w, "symmetric", true));
  KVS_ASSIGN_OR_RETURN(bool dynamic, f.Bool(w, "dynamic", false));
  if (dynamic) return f.Error("compressed-tensors dynamic weight quantization is not supported");
  const std::string strategy = StringField(w, "strategy", "tensor");
  if (strategy == "group") {
    KVS_ASSIGN_OR_RETURN(int64_t g, f.Int(w, "group_size", 0));
    if (g <= 0) return f.Error("compressed-tensors strategy \"group\" needs a group_size > 0");
    KVS_RETURN_IF_ERROR(f.Group(g, c));
  } else if (strategy == "channel") {
    c.group_size = 0;
  } else {
    return f.Error(absl::StrCat("compressed-tensors weight strategy \"", strategy,
                                "\" is not supported (supported: \"group\", \"channel\")"));
  }
  if (w.contains("actorder") && !w.at("actorder").is_null()) {
    const json& a = w.at("actorder");
    c.act_order =
        a.is_boolean() ? a.get<bool>() : (a.is_string() && a.get<std::string>() == "group");
  }
  if (c.w8a8 && c.bits != 8) {
    return f.Error("compressed-tensors int-quantized needs 8-bit weights (W8A8)");
  }
  // Input activations: none (weight-only) or, for W8A8, dynamic per-token int8.
  for (const auto& [name, g] : q.at("config_groups").items()) {
    if (!g.contains("input_activations") || g.at("input_activations").is_null()) {
      if (c.w8a8) {
        return f.Error(absl::StrCat("compressed-tensors int-quantized group \"", name,
                                    "\" has no input_activations (expected dynamic int8)"));
      }
      continue;
    }
    const json& a = g.at("input_activations");
    KVS_ASSIGN_OR_RETURN(int64_t abits, f.Int(a, "num_bits", 8));
    KVS_ASSIGN_OR_RETURN(bool adyn, f.Bool(a, "dynamic", false));
    if (!c.w8a8 || abits != 8 || StringField(a, "type", "int") != "int" || !adyn) {
      return f.Error(absl::StrCat(
          "compressed-tensors input_activations ", a.dump(),
          " are not supported (supported: none, or dynamic int8 for int-quantized W8A8)"));
    }
  }
  KVS_RETURN_IF_ERROR(f.Names(q, "ignore", c.not_converted));
  return c;
}

}  // namespace

QuantizationFamily ClassifyQuantization(std::string_view q_json, std::string* method) {
  const json q = json::parse(q_json, nullptr, /*allow_exceptions=*/false);
  const std::string m = q.is_object() ? StringField(q, "quant_method", q.dump()) : q.dump();
  if (method != nullptr) *method = m;
  const std::string lm = Lower(m);
  if (lm == "mxfp4") return QuantizationFamily::kMxfp4;
  if (lm == "fp8" || lm == "fbgemm_fp8") return QuantizationFamily::kFp8;
  if (lm == "awq" || lm == "gptq") return QuantizationFamily::kInteger;
  if (lm == "compressed-tensors") {
    if (StringField(q, "format") == "float-quantized") return QuantizationFamily::kFp8;
    for (const json* w : CtWeightArgs(q)) {
      if (StringField(*w, "type", "int") == "float") return QuantizationFamily::kFp8;
    }
    return QuantizationFamily::kInteger;
  }
  return QuantizationFamily::kOther;
}

absl::StatusOr<HfQuantConfig> ParseHfQuantConfig(std::string_view q_json, std::string_view origin) {
  const json q = json::parse(q_json, nullptr, /*allow_exceptions=*/false);
  const Fields f(q, origin);
  if (!q.is_object()) return f.Error("expected an object");
  const std::string m = Lower(StringField(q, "quant_method"));
  if (m == "awq") return ParseAwq(f);
  if (m == "gptq") return ParseGptq(f);
  if (m == "compressed-tensors") return ParseCompressedTensors(f);
  return f.Error(absl::StrCat("quant_method \"", m, "\" is not an integer format"));
}

std::string HfQuantConfig::Describe() const {
  const char* m = method == HfQuantMethod::kAwq    ? "awq"
                  : method == HfQuantMethod::kGptq ? "gptq"
                                                   : "compressed-tensors";
  std::string s = absl::StrCat(m, " int", bits, " ");
  absl::StrAppend(&s, group_size > 0 ? absl::StrCat("group ", group_size) : "per channel");
  absl::StrAppend(&s, symmetric ? " symmetric" : " asymmetric");
  if (gptq_v1_zeros) absl::StrAppend(&s, " (v1 zeros)");
  if (act_order) absl::StrAppend(&s, " act-order");
  if (w8a8) absl::StrAppend(&s, " W8A8 (dynamic int8 activations)");
  if (!not_converted.empty()) {
    absl::StrAppend(&s, ", not converted: ", absl::StrJoin(not_converted, ", "));
  }
  return s;
}

}  // namespace kvserve::model
