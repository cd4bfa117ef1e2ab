// Weight block formats: llama.cpp's ggml block types, described once in a table so that
// everything else (the GGUF reader, the kernels' repacking, embeddings, tests) asks the table
// instead of switching on the type. Adding a type = one file in quant/blocks/ (its dequantizer
// and quantizer) + one line in quant/block_table.cc.
//
//   row of `n` elements = n / block_elements blocks, each block_bytes bytes, laid out exactly
//   as ggml writes them (ggml-common.h); e.g. Q4_K: 256 elements in 144 bytes
//     [ d f16 | dmin f16 | scales[12] | qs[128] ]
//
// Invariants: every row's element count is a multiple of block_elements; Dequantize of a row
// equals, bit for bit, the float64 reference of the layout rounded to fp32 in the order ggml
// computes it (tests/unit/quant). Quantize writes valid blocks of that layout (our own
// quantizer: not ggml's search, but every field in range and decoded deterministically).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::quant {

// Values are ggml's `enum ggml_type` ids, so a GGUF tensor's type field maps by value.
enum class BlockType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
  // Our own types (not ggml's; FindBlockType never returns them): Hugging Face integer
  // groups transcoded at load (model/hf_quant_weights.h), w = a * code + b, a and b fp32.
  kU4_F32 = 1024,
  kU8_F32 = 1025,
};
inline constexpr uint32_t kFirstOwnBlockId = 1024;

// One row of a table entry: what the rest of the code may know about a type.
struct BlockTraits {
  BlockType type;
  std::string_view name;  // ggml's name: "Q4_K", "F16", "IQ4_NL", ...
  int block_elements;     // 1 for F32/F16/BF16, 32 or 256 otherwise
  int block_bytes;        // bytes of one block
  bool quantized;         // false for F32/F16/BF16
  // Writes block_elements floats per block for `n` elements (n % block_elements == 0).
  void (*dequantize)(const std::byte* blocks, float* out, int64_t n);
  // Our quantizer: writes n / block_elements blocks from n floats (finite values).
  void (*quantize)(const float* in, std::byte* blocks, int64_t n);
};

// The traits of a known type, or nullopt (an unknown or unsupported ggml id).
std::optional<BlockTraits> FindBlockType(uint32_t ggml_type_id);
// By name, case-insensitive ("q4_k", "Q8_0", "bf16").
std::optional<BlockTraits> FindBlockTypeByName(std::string_view name);
// The traits of a listed type (never fails).
const BlockTraits& Traits(BlockType type);
// Every supported type, in id order.
std::span<const BlockTraits> AllBlockTypes();

// Bytes of a row of n elements; InvalidArgument naming the type when n is not a multiple of
// its block size.
absl::StatusOr<int64_t> RowBytes(BlockType type, int64_t n);

// Dequantizes `rows` rows of `n` elements each, stored back to back, into out[rows][n].
void DequantizeRows(BlockType type, const std::byte* data, int64_t rows, int64_t n, float* out);
// Quantizes in[rows][n] into rows back to back. n must be a multiple of the block size.
void QuantizeRows(BlockType type, const float* in, int64_t rows, int64_t n, std::byte* out);

}  // namespace kvserve::quant
