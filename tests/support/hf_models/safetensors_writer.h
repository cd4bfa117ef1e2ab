// Writes safetensors files the way the Python `safetensors` package does for a
// transformers save_pretrained: an 8-byte little-endian header length, a JSON header
// ({"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}}) padded with
// spaces to a multiple of 8 bytes, then the tensors back to back. With more than one shard
// it writes model-0000k-of-0000n.safetensors plus model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map": {name: file}}), as HF does for large models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::testing::hf {

struct TensorBlob {
  std::string name;
  std::string dtype;  // "F32", "BF16", "U8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major
};

// fp32 -> bf16 with round-to-nearest-even (what torch's .to(torch.bfloat16) does).
uint16_t Bf16FromF32(float f);
float F32FromBf16(uint16_t b);

// Encodes `values` (row-major, product of shape) as F32 or BF16.
TensorBlob MakeFloatTensor(std::string name, std::vector<int64_t> shape,
                           const std::vector<float>& values, bool bf16);

// Writes `tensors` into `dir` (which must exist) as one file, or split into `num_shards`
// files of consecutive tensors in the given order.
absl::Status WriteSafetensors(const std::vector<TensorBlob>& tensors, const std::string& dir,
                              int num_shards);

}  // namespace kvserve::testing::hf
