#include "kernels/cuda/quant_weight_layout.h"

#include "absl/strings/str_cat.h"

namespace kvserve::kernels::cuda {

absl::Status ValidateGroupQuantShape(const GroupQuantShape& shape) {
  if (shape.bits != 4 && shape.bits != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("group-quantized weight: bits must be 4 or 8, not ", shape.bits));
  }
  if (shape.group != 32 && shape.group != 64 && shape.group != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group-quantized weight: group size must be 32, 64 or 128, not ", shape.group));
  }
  if (shape.out < 1 || shape.in < shape.group || shape.in % shape.group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group-quantized weight: bad shape out=", shape.out, " in=", shape.in,
                     " (in must be a positive multiple of group ", shape.group, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackedGroupQuantWeight> PackGroupQuantWeight(const GroupQuantShape& shape,
                                                            std::span<const uint8_t> codes,
                                                            std::span<const uint16_t> scales,
                                                            std::span<const uint8_t> zeros) {
  if (absl::Status s = ValidateGroupQuantShape(shape); !s.ok()) return s;
  const size_t n = static_cast<size_t>(shape.out) * static_cast<size_t>(shape.in);
  const size_t ng = static_cast<size_t>(shape.out) * static_cast<size_t>(shape.groups_per_row());
  if (codes.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("group-quantized weight: codes has ",
                                                   codes.size(), " elements, want out*in = ", n));
  }
  if (scales.size() != ng) {
    return absl::InvalidArgumentError(absl::StrCat("group-quantized weight: scales has ",
                                                   scales.size(),
                                                   " elements, want out*in/group = ", ng));
  }
  if (shape.has_zeros ? zeros.size() != ng : !zeros.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group-quantized weight: zeros has ",
                                                   zeros.size(), " elements, want ",
                                                   shape.has_zeros ? ng : 0));
  }
  const unsigned limit = 1u << shape.bits;
  for (size_t k = 0; k < n; ++k) {
    if (codes[k] >= limit) {
      return absl::InvalidArgumentError(absl::StrCat("group-quantized weight: code ", int{codes[k]},
                                                     " at element ", k, " does not fit in ",
                                                     shape.bits, " bits"));
    }
  }
  for (size_t k = 0; k < zeros.size(); ++k) {
    if (zeros[k] >= limit) {
      return absl::InvalidArgumentError(absl::StrCat("group-quantized weight: zero point ",
                                                     int{zeros[k]}, " at group ", k,
                                                     " does not fit in ", shape.bits, " bits"));
    }
  }
  PackedGroupQuantWeight w;
  w.shape = shape;
  w.scales.assign(scales.begin(), scales.end());
  w.zeros.assign(zeros.begin(), zeros.end());
  if (shape.bits == 8) {
    w.codes.assign(codes.begin(), codes.end());
    return w;
  }
  // 4 bits: even elements in the low nibble, odd in the high one (in is even: a multiple of 32).
  w.codes.assign(n / 2, 0);
  for (size_t k = 0; k < n; k += 2) {
    w.codes[k / 2] = static_cast<uint8_t>(codes[k] | (codes[k + 1] << 4));
  }
  return w;
}

int PackedCode(const PackedGroupQuantWeight& w, int o, int i) {
  const size_t base = static_cast<size_t>(o) * static_cast<size_t>(w.shape.code_row_bytes());
  if (w.shape.bits == 8) return w.codes[base + static_cast<size_t>(i)];
  const uint8_t b = w.codes[base + static_cast<size_t>(i) / 2];
  return (i % 2 == 0) ? (b & 0x0F) : (b >> 4);
}

}  // namespace kvserve::kernels::cuda
