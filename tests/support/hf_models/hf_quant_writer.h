// Hugging Face integer-quantized fixtures (AWQ, GPTQ, compressed-tensors) made from a random
// float fixture (checkpoint_writer.h): every linear projection of the decoder layers (experts
// too; not embeddings, norms, routers or lm_head, which go into the ignore list as real
// checkpoints do) is quantized in groups, then
//   quant_dir: config.json + quantization_config, the integers packed as each format stores
//              them (written here from the format descriptions in the digest
//              quantized-weights.md §4, independently of model/hf_quant_weights.cc);
//   deq_dir:   the original config.json and every weight as F32, the quantized ones replaced
//              by s * (q - z) computed in float64 from the integers (not from the packing):
//              the float64 reference's view of quant_dir.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kvserve::testing::hf {

enum class QuantFormat {
  kAwq,     // AutoAWQ GEMM, int4, zero points, fp16 scales
  kGptq,    // GPTQ int4/int8, sym or not, v1 (zero - 1) or v2, g_idx written
  kCtPack,  // compressed-tensors pack-quantized int4/int8
  kCtInt8,  // compressed-tensors int-quantized W8A8 (I8 weight, per-channel scale)
};

struct QuantSpec {
  QuantFormat format = QuantFormat::kAwq;
  int bits = 4;
  int group = 128;  // 0: one group per output channel
  bool symmetric = false;
  bool gptq_v1 = true;              // GPTQ: checkpoint_format "gptq" (stored zero - 1)
  std::string scale_dtype = "F16";  // compressed-tensors: "F16", "BF16" or "F32"
  // GPTQ g_idx (compressed-tensors weight_g_idx): i / group; act-order (groups are the group-sized
  // runs of a random permutation of the inputs, as desc_act quantizes in Hessian order); or
  // act-order with one input moved to the next group (unequal groups: must be refused).
  enum class Gidx { kSequential, kActOrder, kUnequalGroups } gidx = Gidx::kSequential;
  int shards = 1;  // quant_dir's safetensors files (2: model.safetensors.index.json too)
};

absl::Status WriteQuantizedFixture(const std::string& float_dir, const QuantSpec& spec,
                                   const std::string& quant_dir, const std::string& deq_dir);

}  // namespace kvserve::testing::hf
