// Hugging Face integer-quantized checkpoints: config.json's `quantization_config` for AWQ,
// GPTQ and compressed-tensors, parsed into one printable value (the facts: digest
// quantized-weights.md §4.1-4.3). Every method describes the same thing: per output row,
// groups of `group_size` consecutive input elements share a scale s and an integer zero z,
//
//   w[o][i] = s[o][i / group] * (code[o][i] - z[o][i / group])      code, z unsigned
//
// which model/hf_quant_weights.h reads from each format's tensors and the CPU kernels run
// without dequantizing (quant/blocks/grouped_int.cc). What is refused is refused here, at
// start-up, by name, with what is supported instead.
//
// quantization_config dispatch (ClassifyQuantization): "mxfp4" is gpt-oss's own path
// (model_config.cc), the integer methods come here, FP8 methods (`fp8`, compressed-tensors
// `float-quantized`) have their own slot, anything else is refused naming the method.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

enum class HfQuantMethod { kAwq, kGptq, kCompressedTensors };

enum class QuantizationFamily {
  kMxfp4,    // gpt-oss MXFP4 experts
  kInteger,  // AWQ, GPTQ, compressed-tensors int (ParseHfQuantConfig)
  kFp8,      // quant_method "fp8", compressed-tensors "float-quantized" / float weights
  kOther,    // anything else: refused naming quant_method
};

// The family of a quantization_config object (its JSON text; nlohmann stays private to
// model/), and its quant_method as written (for errors).
QuantizationFamily ClassifyQuantization(std::string_view q_json, std::string* method);

struct HfQuantConfig {
  HfQuantMethod method = HfQuantMethod::kAwq;
  int bits = 4;        // 4 or 8
  int group_size = 0;  // input elements per group, a multiple of 32; 0: one group per row
  bool symmetric = false;
  // GPTQ checkpoint_format "gptq" (v1, AutoGPTQ lineage): qzeros hold z - 1.
  bool gptq_v1_zeros = false;
  // GPTQ desc_act / compressed-tensors actorder "group": a g_idx tensor may assign input
  // elements to groups out of order (only the identity assignment i / group is run today).
  bool act_order = false;
  // compressed-tensors int-quantized W8A8: int8 weights, per-token dynamic int8 activations
  // (our int8 per-32-element activation rounding is at least as fine).
  bool w8a8 = false;
  std::vector<std::string> not_converted;  // modules_to_not_convert / ignore, as written

  // e.g. "gptq int4 group 128 symmetric (v1 zeros)".
  std::string Describe() const;
};

// `q_json`: the quantization_config object of a kInteger family; `origin` prefixes errors
// (e.g. "config.json: quantization_config"; empty: none). InvalidArgument naming the unsupported
// variant and what is supported.
absl::StatusOr<HfQuantConfig> ParseHfQuantConfig(std::string_view q_json, std::string_view origin);

}  // namespace kvserve::model
