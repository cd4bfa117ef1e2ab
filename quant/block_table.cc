// The block-type table: one line per type. Everything outside quant/ asks it (block_type.h).
#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "quant/block_type.h"
#include "quant/blocks/blocks.h"

namespace kvserve::quant {
namespace {

// One line per type: ggml's name (also the enumerator's and the functions' suffix), elements
// and bytes per block, whether it is quantized.
#define KVSERVE_BLOCK(T, elements, bytes, quantized)                                              \
  BlockTraits {                                                                                   \
    BlockType::k##T, #T, elements, bytes, quantized, &blocks::Dequantize##T, &blocks::Quantize##T \
  }

// In ggml id order (AllBlockTypes promises it).
// clang-format off
constexpr std::array kTable = {
    KVSERVE_BLOCK(F32,      1,   4, false),
    KVSERVE_BLOCK(F16,      1,   2, false),
    KVSERVE_BLOCK(Q4_0,    32,  18, true),
    KVSERVE_BLOCK(Q4_1,    32,  20, true),
    KVSERVE_BLOCK(Q5_0,    32,  22, true),
    KVSERVE_BLOCK(Q5_1,    32,  24, true),
    KVSERVE_BLOCK(Q8_0,    32,  34, true),
    KVSERVE_BLOCK(Q2_K,   256,  84, true),
    KVSERVE_BLOCK(Q3_K,   256, 110, true),
    KVSERVE_BLOCK(Q4_K,   256, 144, true),
    KVSERVE_BLOCK(Q5_K,   256, 176, true),
    KVSERVE_BLOCK(Q6_K,   256, 210, true),
    KVSERVE_BLOCK(IQ4_NL,  32,  18, true),
    KVSERVE_BLOCK(IQ4_XS, 256, 136, true),
    KVSERVE_BLOCK(BF16,     1,   2, false),
    KVSERVE_BLOCK(MXFP4,   32,  17, true),
    // Ours (ids >= kFirstOwnBlockId, never in a GGUF file): grouped_int.cc.
    KVSERVE_BLOCK(U4_F32,  32,  24, true),
    KVSERVE_BLOCK(U8_F32,  32,  40, true),
};
// clang-format on
#undef KVSERVE_BLOCK

constexpr bool IdsAscending() {
  for (size_t i = 1; i < kTable.size(); ++i) {
    if (static_cast<uint32_t>(kTable[i - 1].type) >= static_cast<uint32_t>(kTable[i].type)) {
      return false;
    }
  }
  return true;
}
static_assert(IdsAscending(), "kTable must be in ggml id order");

}  // namespace

std::optional<BlockTraits> FindBlockType(uint32_t ggml_type_id) {
  if (ggml_type_id >= kFirstOwnBlockId) return std::nullopt;  // not a ggml id
  for (const BlockTraits& t : kTable) {
    if (static_cast<uint32_t>(t.type) == ggml_type_id) return t;
  }
  return std::nullopt;
}

std::optional<BlockTraits> FindBlockTypeByName(std::string_view name) {
  for (const BlockTraits& t : kTable) {
    if (absl::EqualsIgnoreCase(base::AsAbsl(t.name), base::AsAbsl(name))) return t;
  }
  return std::nullopt;
}

const BlockTraits& Traits(BlockType type) {
  for (const BlockTraits& t : kTable) {
    if (t.type == type) return t;
  }
  // Every enumerator has a line in kTable (tests/unit/quant checks it).
  base::internal::CheckFailed(__FILE__, __LINE__, "type listed",
                              absl::StrCat("ggml type id ", static_cast<uint32_t>(type)));
}

std::span<const BlockTraits> AllBlockTypes() { return kTable; }

absl::StatusOr<int64_t> RowBytes(BlockType type, int64_t n) {
  const BlockTraits& t = Traits(type);
  if (n < 0 || n % t.block_elements != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block type ", base::AsAbsl(t.name), ": a row of ", n,
        " elements is not a multiple of its block of ", t.block_elements, " elements"));
  }
  return n / t.block_elements * t.block_bytes;
}

void DequantizeRows(BlockType type, const std::byte* data, int64_t rows, int64_t n, float* out) {
  // Rows are back to back and n is a whole number of blocks, so the rows are one long run.
  Traits(type).dequantize(data, out, rows * n);
}

void QuantizeRows(BlockType type, const float* in, int64_t rows, int64_t n, std::byte* out) {
  Traits(type).quantize(in, out, rows * n);
}

}  // namespace kvserve::quant
