// Names of every ggml tensor type id a GGUF file may carry, including the ones kvserve does
// not run (quant/block_type.h lists those it does). The reader uses them so that a refusal
// says "IQ2_XXS (ggml type 16) is not supported" instead of a bare number, and so that a
// retired in-file repack (Q4_0_4_4, ...) is told apart from an id no ggml version defined.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::gguf {

// ggml's name for `id` ("Q4_K", "IQ2_XXS", "Q4_0_4_4"), or an empty view for an id no ggml
// version has defined.
std::string_view GgmlTypeName(uint32_t id);
// True for ids ggml has retired (4, 5: Q4_2/Q4_3; 31-33, 36-38: in-file repacks now done at
// load time). Files carrying them predate the current format and must be re-converted.
bool IsRetiredGgmlType(uint32_t id);
// "IQ2_XXS (ggml type 16)", "Q4_0_4_4 (ggml type 31, retired)" or "unknown ggml type 99".
std::string DescribeGgmlType(uint32_t id);

}  // namespace kvserve::gguf
