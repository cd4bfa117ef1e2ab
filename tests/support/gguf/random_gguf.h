// A random-weight Llama-architecture GGUF of any size, written fast: the benchmarks' 8B-shaped
// file and the memory test's fixture. Rows are quantized once (our quantizer on a pool of
// random Gaussian rows, std 0.02) and then repeated with a per-tensor rotation, so writing a
// multi-gigabyte file costs about a copy of its bytes; the values are valid blocks of the
// chosen types and vary within each tensor, which is all a memory or speed measurement needs.
// Types follow a preset (model/gguf_export.h: Q8_0, Q6_K, Q5_K_M, Q4_K_M) or a single type.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::testing {

struct RandomGgufSpec {
  int hidden = 512;
  int intermediate = 1536;
  int layers = 4;
  int heads = 8;
  int kv_heads = 4;
  int head_dim = 64;
  int vocab = 2048;
  int64_t context = 2048;
  double rope_theta = 500000.0;
  bool tied = false;
  std::string type = "Q4_K_M";
  // When set, tokenizer.ggml.* is copied from this tokenizer.json (the bundled model's, say),
  // with the chat template of the tokenizer_config.json beside it.
  std::string tokenizer_json;
};

// Writes the file; returns its size in bytes.
absl::StatusOr<uint64_t> WriteRandomGguf(const RandomGgufSpec& spec, const std::string& path);

}  // namespace kvserve::testing
