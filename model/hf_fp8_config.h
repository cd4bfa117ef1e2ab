// The `quantization_config` of a Hugging Face FP8 checkpoint (config.json), parsed once and
// validated, for the FP8 weight loader (hf_fp8_weights.h). Two methods:
//
//   quant_method "fp8" (DeepSeek-V3 / Qwen3-FP8 style, transformers' FineGrainedFP8Config):
//     {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//      "weight_block_size": [128, 128], "modules_to_not_convert" | "ignored_layers": [...]}
//     X.weight F8_E4M3 [out][in], X.weight_scale_inv [ceil(out/br)][ceil(in/bc)],
//     w = code * scale_inv (despite the name, a multiplier). Without weight_block_size:
//     one X.weight_scale per tensor.
//   quant_method "compressed-tensors", format "float-quantized" / "naive-quantized" (llm-
//     compressor's FP8, FP8_DYNAMIC, FP8_BLOCK): config_groups.*.weights = {type "float",
//     num_bits 8, strategy "tensor" | "channel" | "group" | "block"}, X.weight F8_E4M3 and
//     X.weight_scale ([] or [1]; [out] or [out][1]; [out][in/group]; [out/br][in/bc]).
//
// Every scheme becomes one form: a scale per block_rows x block_cols weights (0: the whole
// dimension), with block_cols a multiple of 128 so the kernel's 128-column blocks
// (kernels/cpu/quant/fp8_format.h) carry it exactly. Activations run in fp32 whatever the
// checkpoint's activation scheme says (dynamic per-token or per-group, or static per-tensor
// `input_scale`, which is then unused): at least as accurate as rounding them to e4m3.
// Refused, by name: e5m2 weights, non-8-bit or integer weights in an FP8 method, column
// blocks or groups that are not multiples of 128, asymmetric weights, static activation
// scales with block-scaled weights (no kernel defines them), integer or 4-bit activations,
// output activations, sparsity and transforms. A compressed-tensors config without float
// weights is not FP8 (nullopt): the integer formats are parsed elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

enum class Fp8Method { kFp8, kCompressedTensors };

struct HfFp8Config {
  Fp8Method method = Fp8Method::kFp8;
  std::string scale_suffix = "weight_scale_inv";  // tensor X.<suffix> beside X.weight
  // Weights per scale: rows x cols; 0 = the whole dimension (per-tensor: 0 x 0, per-channel:
  // 1 x 0, per-group g: 1 x g, block: br x bc). cols is 0 or a multiple of 128.
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  std::string activations;  // what the checkpoint asks, for the start-up log
  // Modules left unquantized (names, name prefixes/suffixes at a '.', or "re:" patterns).
  std::vector<std::string> ignore;

  bool Ignored(std::string_view module) const;
  // e.g. "fp8 block 128x128, activations dynamic (run in fp32)".
  std::string Describe() const;
};

// nullopt when `quantization_config_json` is not an FP8 method (another parser's); errors
// name the key and the value refused (the caller prefixes the file and field).
absl::StatusOr<std::optional<HfFp8Config>> ParseHfFp8Config(
    std::string_view quantization_config_json);

}  // namespace kvserve::model
