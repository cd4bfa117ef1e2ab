// WriteFp8Checkpoint: turns a random fixture directory (checkpoint_writer.h) into a Hugging
// Face FP8 checkpoint as the converters leave it, plus the float view of the same weights:
//
//   src_dir (F32/BF16)  ──►  fp8_dir: config.json + quantization_config; every projection
//                            X.weight as F8_E4M3 [out][in] with X.weight_scale_inv (quant_method
//                            fp8) or X.weight_scale (compressed-tensors), and X.input_scale for
//                            static activation schemes; embeddings, norms, routers, lm_head and
//                            the `not_converted` modules as they were (listed in the ignore list)
//                      └──►  deq_dir: the original config.json; the projections as F32 holding
//                            e4m3_value(code) * scale (float64, rounded once), the rest as-is
//
// Quantizer (as llm-compressor and DeepSeek's weight_quant): per scale group s = amax / 448
// (1 for an all-zero group), stored in F32 or BF16 (then the rounded s is the one used), and
// code = round-to-nearest-even e4m3 of w / s (fp8_e4m3.h). Groups: the whole tensor, a row,
// or block_rows x block_cols, ragged at the edges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::testing::hf {

struct Fp8FixtureOptions {
  bool compressed_tensors = false;  // else quant_method "fp8"
  // Weights per scale (0: the whole dimension): 0 x 0 per-tensor, 1 x 0 per-channel, 1 x g
  // per-group (compressed-tensors), br x bc blocks.
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  bool bf16_scales = false;
  bool static_activations = false;         // writes input_scale tensors and a static scheme
  std::vector<std::string> not_converted;  // module names kept in their float dtype
};

absl::Status WriteFp8Checkpoint(const std::string& src_dir, const Fp8FixtureOptions& options,
                                const std::string& fp8_dir, const std::string& deq_dir);

// The quantization_config object the writer puts in config.json (JSON text).
std::string Fp8QuantizationConfigJson(const Fp8FixtureOptions& options);

}  // namespace kvserve::testing::hf
