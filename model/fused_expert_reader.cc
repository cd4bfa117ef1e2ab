#include "model/fused_expert_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"

namespace kvserve::model::internal {
namespace {

constexpr int64_t kMxfp4Block = 32;  // elements per scale, along the input dimension

absl::Status TensorError(const TensorFile& f, const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(f.path(), ": tensor \"", name, "\": ", base::AsAbsl(what)));
}

using Found = std::pair<const TensorFile*, const SafetensorsEntry*>;

absl::StatusOr<Found> FindShaped(const SafetensorsCheckpoint& ckpt, const std::string& name,
                                 const std::vector<int64_t>& shape) {
  KVS_ASSIGN_OR_RETURN(Found found, ckpt.Find(name));
  if (found.second->shape != shape) {
    return TensorError(
        *found.first, name,
        absl::StrCat("shape [", absl::StrJoin(found.second->shape, ", "), "], expected [",
                     absl::StrJoin(shape, ", "), "] (from config.json)"));
  }
  return found;
}

// The stored tensor's shape for the spec's layout (MXFP4: the blocks tensor).
std::vector<int64_t> StoredShape(const WeightSpec& s) {
  const int64_t e = s.fused.num_experts, rows = s.rows();
  switch (s.fused.layout) {
    case FusedLayout::kInputMajor:
      return {e, s.cols, rows};
    case FusedLayout::kVectors:
      return {e, rows};
    case FusedLayout::kMxfp4:
      return {e, rows, s.cols / kMxfp4Block, 16};
    case FusedLayout::kNone:
      break;
  }
  return {};
}

int64_t StoredRow(const WeightSpec& s, int64_t r) {
  if (!s.fused.interleaved_gate_up) return r;
  const int64_t half = s.rows() / 2;
  return r < half ? 2 * r : 2 * (r - half) + 1;
}

absl::Status CheckSpec(const WeightSpec& s) {
  KVS_CHECK(s.fused.layout != FusedLayout::kNone && s.names.size() == 1, "fused expert spec");
  if (s.fused.expert < 0 || s.fused.expert >= s.fused.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(s.names[0], ": expert ", s.fused.expert,
                                                   " outside [0, ", s.fused.num_experts, ")"));
  }
  if (s.fused.interleaved_gate_up && s.rows() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.names[0], ": interleaved gate/up needs an even row count"));
  }
  if (s.fused.layout == FusedLayout::kMxfp4 && s.cols % kMxfp4Block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.names[0], ": MXFP4 needs cols divisible by 32"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WeightDtype> StoredDtype(const TensorFile& f, const SafetensorsEntry& e) {
  if (e.dtype == "F32") return WeightDtype::kF32;
  if (e.dtype == "BF16") return WeightDtype::kBf16;
  if (e.dtype == "F16") return WeightDtype::kF16;
  return TensorError(
      f, e.name, absl::StrCat("dtype ", e.dtype, " is not supported (supported: F32, BF16, F16)"));
}

// Copies element (r, c) of the expert's [rows][cols] result from its place in `slice`.
// Row-major slices (kVectors) copy stored rows whole. Input-major ones are a transpose, done in
// square tiles so that both the strided reads and the strided writes stay in L1; a row-at-a-time
// transpose of a multi-MB expert matrix misses the cache on every element.
template <typename T>
void Gather(const WeightSpec& s, const std::byte* slice, std::byte* out) {
  const int64_t rows = s.rows(), cols = s.cols;
  if (s.fused.layout != FusedLayout::kInputMajor) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out + r * cols * sizeof(T), slice + StoredRow(s, r) * cols * sizeof(T),
                  static_cast<size_t>(cols) * sizeof(T));
    }
    return;
  }
  constexpr int64_t kTile = 64;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) {
          std::memcpy(out + (r * cols + c) * sizeof(T),
                      slice + (c * rows + StoredRow(s, r)) * sizeof(T), sizeof(T));
        }
      }
    }
  }
}

// NaN or infinity anywhere in the result: the exponent-all-ones test of each format.
bool AllFinite(const std::byte* p, int64_t n, WeightDtype d, int64_t* bad) {
  for (int64_t i = 0; i < n; ++i) {
    bool finite;
    if (d == WeightDtype::kF32) {
      uint32_t b;
      std::memcpy(&b, p + 4 * i, 4);
      finite = (b & 0x7f800000u) != 0x7f800000u;
    } else {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      const uint16_t mask = d == WeightDtype::kBf16 ? 0x7f80 : 0x7c00;
      finite = (b & mask) != mask;
    }
    if (!finite) return *bad = i, false;
  }
  return true;
}

// MXFP4 -> BF16 bits. Exact: an FP4 value has at most 2 significant bits and 2^(s - 127)
// spans bf16's (fp32's) exponent range, subnormals included; a product past the largest
// bf16 becomes infinity, which AllFinite then refuses.
absl::Status UnpackMxfp4(const SafetensorsCheckpoint& ckpt, const WeightSpec& s,
                         std::span<std::byte> out) {
  const int64_t e = s.fused.num_experts, rows = s.rows(), nb = s.cols / kMxfp4Block;
  KVS_ASSIGN_OR_RETURN(Found blocks, FindShaped(ckpt, s.names[0], {e, rows, nb, 16}));
  KVS_ASSIGN_OR_RETURN(Found scales, FindShaped(ckpt, s.fused.scales_name, {e, rows, nb}));
  for (const Found& f : {blocks, scales}) {
    if (f.second->dtype != "U8") {
      return TensorError(*f.first, f.second->name,
                         absl::StrCat("dtype ", f.second->dtype, ", expected U8 (MXFP4)"));
    }
  }
  const auto* b = reinterpret_cast<const uint8_t*>(blocks.first->Bytes(*blocks.second).data()) +
                  s.fused.expert * rows * nb * 16;
  const auto* sc = reinterpret_cast<const uint8_t*>(scales.first->Bytes(*scales.second).data()) +
                   s.fused.expert * rows * nb;
  uint16_t* dst = reinterpret_cast<uint16_t*>(out.data());
  auto to_bf16 = [](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return static_cast<uint16_t>(bits >> 16);  // exact: the low 16 bits are zero
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sr = StoredRow(s, r);
    for (int64_t k = 0; k < nb; ++k) {
      const int exponent = static_cast<int>(sc[sr * nb + k]) - 127;
      const uint8_t* block = b + (sr * nb + k) * 16;
      uint16_t* o = dst + r * s.cols + k * kMxfp4Block;
      for (int j = 0; j < 16; ++j) {
        o[2 * j] = to_bf16(std::ldexp(Fp4E2M1(block[j] & 0x0Fu), exponent));
        o[2 * j + 1] = to_bf16(std::ldexp(Fp4E2M1(block[j] >> 4), exponent));
      }
    }
  }
  int64_t bad = 0;
  const bool finite = AllFinite(out.data(), s.elements(), WeightDtype::kBf16, &bad);
  blocks.first->Release(*blocks.second);
  scales.first->Release(*scales.second);
  if (!finite) {
    return TensorError(
        *blocks.first, s.names[0],
        absl::StrCat("expert ", s.fused.expert, " element ", bad, " unpacks to infinity or NaN"));
  }
  return absl::OkStatus();
}

}  // namespace

float Fp4E2M1(unsigned code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7u];
  return (code & 8u) != 0 ? -m : m;
}

absl::StatusOr<WeightDtype> FusedExpertDtype(const SafetensorsCheckpoint& ckpt,
                                             const WeightSpec& spec) {
  KVS_RETURN_IF_ERROR(CheckSpec(spec));
  if (spec.fused.layout == FusedLayout::kMxfp4) return WeightDtype::kBf16;
  KVS_ASSIGN_OR_RETURN(Found found, ckpt.Find(spec.names[0]));
  return StoredDtype(*found.first, *found.second);
}

absl::Status ReadFusedExpert(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
                             WeightDtype dtype, std::span<std::byte> out) {
  KVS_RETURN_IF_ERROR(CheckSpec(spec));
  KVS_CHECK(out.size() == static_cast<size_t>(spec.elements()) * WeightDtypeBytes(dtype),
            "ReadFusedExpert: destination size");
  if (spec.fused.layout == FusedLayout::kMxfp4) {
    if (dtype != WeightDtype::kBf16) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.names[0], ": MXFP4 experts unpack to BF16, not ", WeightDtypeName(dtype)));
    }
    return UnpackMxfp4(ckpt, spec, out);
  }
  KVS_ASSIGN_OR_RETURN(Found found, FindShaped(ckpt, spec.names[0], StoredShape(spec)));
  const auto& [file, entry] = found;
  KVS_ASSIGN_OR_RETURN(WeightDtype stored, StoredDtype(*file, *entry));
  if (stored != dtype) {
    return TensorError(
        *file, entry->name,
        absl::StrCat("is ", WeightDtypeName(stored), ", expected ", WeightDtypeName(dtype)));
  }
  const size_t esize = WeightDtypeBytes(dtype);
  const std::byte* slice =
      file->Bytes(*entry).data() + static_cast<size_t>(spec.fused.expert) * spec.elements() * esize;
  if (esize == 4) {
    Gather<uint32_t>(spec, slice, out.data());
  } else {
    Gather<uint16_t>(spec, slice, out.data());
  }
  file->Release(*entry);
  int64_t bad = 0;
  if (!AllFinite(out.data(), spec.elements(), dtype, &bad)) {
    return TensorError(*file, entry->name,
                       absl::StrCat("expert ", spec.fused.expert, " element ", bad,
                                    " is NaN or infinite (corrupt weights?)"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model::internal
