// Writes a Hugging Face checkpoint directory as a GGUF file in llama.cpp's conventions, with
// our own quantizer (quant/block_type.h): what `kvserve export-gguf` runs and what tests
// generate their GGUF fixtures with.
//
//   config.json        ──► general.* and {arch}.* keys (gguf_config.h reads them back)
//   rope scaling       ──► llama3: rope_freqs (per-frequency divisors); longrope:
//                          rope_factors_long/short; linear, yarn: rope.scaling.* keys
//   tensors            ──► gguf_names.h; q/k rows permuted per head for the llama
//                          architecture; Gemma norms stored as (1 + w); experts stacked
//   tokenizer.json     ──► tokenizer.ggml.* (when the directory has one)
//
// Tensor types follow llama.cpp's presets (the type of each tensor by name, layer and shape,
// quantized-weights digest §2.5): Q8_0, Q6_K, Q5_K_M, Q4_K_M; or one type name (F32, F16,
// BF16, Q4_0, IQ4_NL, ...) for every matrix. Vectors (norms, biases) and routers stay F32.
// A row length the chosen type's block does not divide falls back as llama.cpp does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, else F16).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "quant/block_type.h"

namespace kvserve::model {

struct GgufExportOptions {
  std::string type = "F16";     // a preset or a block type name
  uint64_t max_file_bytes = 0;  // > 0: split files of at most this much tensor data
};

// The preset and type names `type` accepts, for messages.
std::string GgufExportTypes();

// The type the exporter gives the matrix `gguf_name` (of layer `layer`, -1 for none) whose rows
// hold `cols` elements, under `type` (a preset or a block type name).
absl::StatusOr<quant::BlockType> GgufMatrixType(const std::string& type, const ModelConfig& config,
                                                std::string_view gguf_name, int layer,
                                                int64_t cols);

// Returns the paths written.
absl::StatusOr<std::vector<std::string>> ExportGguf(const std::string& hf_dir,
                                                    const std::string& out_path,
                                                    const GgufExportOptions& options);

}  // namespace kvserve::model
