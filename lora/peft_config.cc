#include "lora/peft_config.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "nlohmann/json.hpp"

namespace kvserve::lora {

// ordered_json: pattern keys keep the file's order, which decides the first match.
using Json = nlohmann::ordered_json;

struct PeftConfig::Pattern {
  std::string key;
  std::regex re;  // (.*\.)?(key)$ over the whole module name
  double value = 0;
};

namespace {

class Reader {
 public:
  Reader(const Json& j, std::string_view origin) : j_(j), origin_(origin) {}
  absl::Status Error(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(base::AsAbsl(origin_), ": ", base::AsAbsl(field), ": ", base::AsAbsl(what)));
  }
  bool Has(const char* f) const { return j_.contains(f) && !j_.at(f).is_null(); }
  const Json& At(const char* f) const { return j_.at(f); }
  absl::Status Unsupported(const char* f, std::string_view why) const {
    return Error(f, absl::StrCat(base::AsAbsl(why), " is not supported (got ", Shown(At(f)), ")"));
  }
  static std::string Shown(const Json& v) {
    std::string s = v.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  }

 private:
  const Json& j_;
  std::string_view origin_;
};

// True when the field is absent, null, false, or an empty list/object/string.
bool IsUnset(const Json& j, const char* f) {
  if (!j.contains(f)) return true;
  const Json& v = j.at(f);
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_array() || v.is_object() || v.is_string())
    return v.empty() || (v.is_string() && v.get<std::string>().empty());
  return false;
}

// The features whose semantics kvserve does not compute: each silently changes the output
// if ignored, so each is refused by name (the list vLLM's PEFTHelper refuses, plus the
// whole-module replacements).
absl::Status RefuseUnsupported(const Json& j, const Reader& r) {
  struct Refusal {
    const char* field;
    const char* what;
  };
  static constexpr Refusal kRefused[] = {
      {"use_dora", "DoRA (use_dora)"},
      {"modules_to_save",
       "modules_to_save (whole modules such as lm_head or embed_tokens replaced per adapter)"},
      {"lora_bias", "a trained bias on lora_B (lora_bias)"},
      {"fan_in_fan_out", "fan_in_fan_out (GPT-2 Conv1D weights)"},
      {"target_parameters", "LoRA on raw parameters (target_parameters, fused 3-D expert tensors)"},
      {"trainable_token_indices", "trainable embedding rows (trainable_token_indices)"},
      {"layer_replication", "layer_replication"},
      {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
      {"use_qalora", "QA-LoRA (use_qalora)"},
      {"use_bdlora", "BD-LoRA (use_bdlora)"},
  };
  for (const Refusal& f : kRefused) {
    if (!IsUnset(j, f.field)) return r.Unsupported(f.field, f.what);
  }
  if (r.Has("bias")) {
    const Json& b = r.At("bias");
    if (!b.is_string()) return r.Error("bias", "expected a string");
    if (b.get<std::string>() != "none")
      return r.Unsupported("bias", "training the base model's biases (bias != \"none\")");
  }
  if (r.Has("init_lora_weights")) {
    const Json& v = r.At("init_lora_weights");
    if (v.is_string()) {
      // Only initialisations that leave the base weights alone; PiSSA, OLoRA, CorDA, LoftQ
      // and the like rewrite W, so the adapter is meaningless over the unmodified base.
      static const char* kOk[] = {"gaussian", "eva", "orthogonal", "mica", "lora_ga"};
      const std::string s = v.get<std::string>();
      bool ok = false;
      for (const char* k : kOk) ok = ok || s == k;
      if (!ok)
        return r.Unsupported("init_lora_weights",
                             "an initialisation that modifies the base weights");
    } else if (!v.is_boolean()) {
      return r.Error("init_lora_weights", "expected true, false or a string");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<const PeftConfig::Pattern>>> ParsePatterns(
    const Json& j, const Reader& r, const char* field, bool integer) {
  std::vector<std::shared_ptr<const PeftConfig::Pattern>> out;
  if (!r.Has(field)) return out;
  const Json& obj = r.At(field);
  if (!obj.is_object()) return r.Error(field, "expected an object of pattern -> value");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    const std::string where = absl::StrCat(field, "[\"", key, "\"]");
    const Json& v = it.value();
    auto p = std::make_shared<PeftConfig::Pattern>();
    p->key = key;
    if (integer) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
        return r.Error(where, absl::StrCat("expected a rank >= 1, got ", Reader::Shown(v)));
      }
    } else if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return r.Error(where, absl::StrCat("expected a number, got ", Reader::Shown(v)));
    }
    p->value = v.get<double>();
    // std::regex reports a bad pattern by throwing; it never leaves this function.
    try {
      p->re = std::regex("(.*\\.)?(" + key + ")$", std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return r.Error(where, absl::StrCat("not a valid regular expression: ", e.what()));
    }
    out.push_back(std::move(p));
  }
  (void)j;
  return out;
}

const PeftConfig::Pattern* FirstMatch(
    const std::vector<std::shared_ptr<const PeftConfig::Pattern>>& patterns,
    std::string_view module) {
  for (const auto& p : patterns) {
    if (std::regex_match(module.begin(), module.end(), p->re)) return p.get();
  }
  return nullptr;
}

}  // namespace

int PeftConfig::max_rank() const {
  int m = r_;
  for (const auto& p : rank_pattern_) m = std::max(m, static_cast<int>(p->value));
  return m;
}

int PeftConfig::RankFor(std::string_view module) const {
  const Pattern* p = FirstMatch(rank_pattern_, module);
  return p != nullptr ? static_cast<int>(p->value) : r_;
}

double PeftConfig::AlphaFor(std::string_view module) const {
  const Pattern* p = FirstMatch(alpha_pattern_, module);
  return p != nullptr ? p->value : alpha_;
}

double PeftConfig::ScaleFor(std::string_view module) const {
  const double rank = RankFor(module);
  return AlphaFor(module) / (use_rslora_ ? std::sqrt(rank) : rank);
}

std::string PeftConfig::CanonicalText() const {
  auto num = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  std::string s = absl::StrCat("r=", r_, ";alpha=", num(alpha_), ";rslora=", use_rslora_ ? 1 : 0,
                               ";rank_pattern=");
  for (const auto& p : rank_pattern_) absl::StrAppend(&s, p->key, ":", num(p->value), ",");
  absl::StrAppend(&s, ";alpha_pattern=");
  for (const auto& p : alpha_pattern_) absl::StrAppend(&s, p->key, ":", num(p->value), ",");
  return s;
}

absl::StatusOr<PeftConfig> ParsePeftConfig(std::string_view json_text, std::string_view origin) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": not a JSON object"));
  }
  Reader r(j, origin);
  if (!r.Has("peft_type")) return r.Error("peft_type", "missing (required; \"LORA\")");
  if (!r.At("peft_type").is_string() || r.At("peft_type").get<std::string>() != "LORA") {
    return r.Error("peft_type", absl::StrCat("only \"LORA\" is supported, got ",
                                             Reader::Shown(r.At("peft_type"))));
  }
  if (auto st = RefuseUnsupported(j, r); !st.ok()) return st;
  PeftConfig c;
  if (r.Has("r")) {
    const Json& v = r.At("r");
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
      return r.Error("r", absl::StrCat("expected a rank >= 1, got ", Reader::Shown(v)));
    }
    c.r_ = v.get<int>();
  }
  if (r.Has("lora_alpha")) {
    const Json& v = r.At("lora_alpha");
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return r.Error("lora_alpha", absl::StrCat("expected a number, got ", Reader::Shown(v)));
    }
    c.alpha_ = v.get<double>();
  }
  if (r.Has("use_rslora")) {
    if (!r.At("use_rslora").is_boolean()) return r.Error("use_rslora", "expected true or false");
    c.use_rslora_ = r.At("use_rslora").get<bool>();
  }
  if (r.Has("base_model_name_or_path") && r.At("base_model_name_or_path").is_string()) {
    c.base_model_ = r.At("base_model_name_or_path").get<std::string>();
  }
  auto ranks = ParsePatterns(j, r, "rank_pattern", /*integer=*/true);
  if (!ranks.ok()) return ranks.status();
  c.rank_pattern_ = *std::move(ranks);
  auto alphas = ParsePatterns(j, r, "alpha_pattern", /*integer=*/false);
  if (!alphas.ok()) return alphas.status();
  c.alpha_pattern_ = *std::move(alphas);
  return c;
}

}  // namespace kvserve::lora
