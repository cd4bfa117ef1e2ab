// A PEFT LoRA adapter's adapter_config.json: the fields that change what the adapter
// computes, parsed and checked fail-closed. Everything a field can ask for that kvserve does
// not compute is refused here, naming the field, never ignored:
//
//   accepted:  peft_type "LORA", r, lora_alpha, use_rslora, rank_pattern, alpha_pattern,
//              target_modules / exclude_modules / layers_to_transform / layers_pattern /
//              task_type / base_model_name_or_path / revision (informational: the weight
//              file's keys are the truth), init_lora_weights true/false/"gaussian"/"eva"/
//              "orthogonal" (initialisations that do not touch the base weights)
//   refused:   use_dora, modules_to_save, bias other than "none", lora_bias, fan_in_fan_out,
//              target_parameters (3-D fused expert parameters), trainable_token_indices,
//              layer_replication, alora_invocation_tokens, use_qalora, use_bdlora, and the
//              init_lora_weights that rewrite the base (pissa*, olora, corda, loftq, ...)
//
// Per-module rank and alpha (PEFT's get_pattern_key): the FIRST key k of rank_pattern (resp.
// alpha_pattern), in the file's order, for which the regular expression (.*\.)?(k)$ matches
// the whole module name ("model.layers.7.self_attn.q_proj") wins; no match: r (lora_alpha).
// Keys are ECMAScript regular expressions (std::regex), which agree with Python's `re` on
// the literals, dots, classes, alternations and repetitions such keys use.
//
// Scale of a module: alpha_m / r_m, or alpha_m / sqrt(r_m) with use_rslora.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::lora {

class PeftConfig {
 public:
  int r() const { return r_; }
  double lora_alpha() const { return alpha_; }
  bool use_rslora() const { return use_rslora_; }
  const std::string& base_model_name_or_path() const { return base_model_; }
  // The largest rank any module can get (r and every rank_pattern value): what
  // max_lora_rank is checked against before any tensor is read.
  int max_rank() const;

  // The module's rank, alpha and scale under the pattern rule above. `module` is the module
  // path without "base_model.model." and without ".lora_A.weight".
  int RankFor(std::string_view module) const;
  double AlphaFor(std::string_view module) const;
  double ScaleFor(std::string_view module) const;

  // Canonical text of the fields above (sorted, fixed formatting): part of the adapter's
  // content hash, so a changed alpha is a different adapter even with the same tensors.
  std::string CanonicalText() const;

  struct Pattern;  // a key, its compiled regex, the value (defined in the .cc)

 private:
  friend absl::StatusOr<PeftConfig> ParsePeftConfig(std::string_view, std::string_view);
  int r_ = 8;
  double alpha_ = 8.0;
  bool use_rslora_ = false;
  std::string base_model_;
  std::vector<std::shared_ptr<const Pattern>> rank_pattern_;   // file order
  std::vector<std::shared_ptr<const Pattern>> alpha_pattern_;  // file order
};

// Parses adapter_config.json text; `origin` (the file path) prefixes every error.
absl::StatusOr<PeftConfig> ParsePeftConfig(std::string_view json_text, std::string_view origin);

}  // namespace kvserve::lora
