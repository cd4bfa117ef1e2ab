#include "gguf/ggml_type_names.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::gguf {
namespace {

// Indexed by ggml type id (include/ggml.h `enum ggml_type`); "" = never defined.
constexpr std::array<std::string_view, 43> kNames = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
    "Q2_0",
};

}  // namespace

std::string_view GgmlTypeName(uint32_t id) {
  return id < kNames.size() ? kNames[id] : std::string_view();
}

bool IsRetiredGgmlType(uint32_t id) {
  return id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38);
}

std::string DescribeGgmlType(uint32_t id) {
  const std::string_view name = GgmlTypeName(id);
  if (name.empty()) return absl::StrCat("unknown ggml type ", id);
  return absl::StrCat(base::AsAbsl(name), " (ggml type ", id,
                      IsRetiredGgmlType(id) ? ", retired" : "", ")");
}

}  // namespace kvserve::gguf
