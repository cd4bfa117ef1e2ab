#include "model/tensor_reader.h"

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "model/fused_expert_reader.h"

namespace kvserve::model {
namespace {

absl::Status TensorError(const TensorFile& f, const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor \"", name, "\": ", base::AsAbsl(what)));
}

absl::StatusOr<WeightDtype> DtypeOf(const TensorFile& f, const SafetensorsEntry& e) {
  if (e.dtype == "F32") return WeightDtype::kF32;
  if (e.dtype == "BF16") return WeightDtype::kBf16;
  if (e.dtype == "F16") return WeightDtype::kF16;
  if (e.dtype_bytes == 0) {
    return TensorError(f, e.name, absl::StrCat("is stored in blocks of ", e.dtype,
                                               ", which this weight cannot hold (only projections and the "
                                               "embedding may be quantized)"));
  }
  return TensorError(f, e.name, absl::StrCat("dtype ", e.dtype, " is not supported (supported: F32, BF16, F16)"));
}

// The exponent-all-ones test of each format: NaN or infinity.
bool AllFinite(const std::byte* p, int64_t n, WeightDtype d, int64_t* bad) {
  switch (d) {
    case WeightDtype::kF32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        if ((b & 0x7f800000u) == 0x7f800000u) return *bad = i, false;
      }
      return true;
    case WeightDtype::kBf16:
    case WeightDtype::kF16: {
      const uint16_t mask = d == WeightDtype::kBf16 ? 0x7f80 : 0x7c00;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        if ((b & mask) == mask) return *bad = i, false;
      }
      return true;
    }
  }
  return true;
}

// Each tensor of the spec in order, shape-checked, with its bytes (read ahead) in Hugging
// Face row order (a permuted GGUF tensor is un-permuted into a copy first).
template <typename Fn>
absl::Status ForEachTensor(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, Fn&& fn) {
  KVS_CHECK(spec.names.size() == spec.row_counts.size(), "weight spec: names and row counts differ");
  int64_t row = 0;
  std::vector<std::byte> unpermuted;
  for (size_t i = 0; i < spec.names.size(); ++i) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(spec.names[i]));
    const auto& [file, entry] = found;
    KVS_RETURN_IF_ERROR(CheckShape(*file, *entry, spec, i));
    KVS_ASSIGN_OR_RETURN(WeightDtype d, DtypeOf(*file, *entry));
    file->WillNeed(*entry);
    std::span<const std::byte> bytes = file->Bytes(*entry);
    int64_t bad = 0;
    if (!AllFinite(bytes.data(), entry->num_elements(), d, &bad)) {
      file->Release(*entry);
      return TensorError(*file, entry->name, absl::StrCat("element ", bad, " is NaN or infinite (corrupt weights?)"));
    }
    if (entry->permute_heads > 0) {
      unpermuted.resize(bytes.size());
      UnpermuteHeadRows(bytes, entry->shape.front(), entry->permute_heads, unpermuted);
      bytes = unpermuted;
    }
    KVS_RETURN_IF_ERROR(fn(*file, *entry, d, bytes, row));
    row += spec.row_counts[i];
  }
  return absl::OkStatus();
}

// A fused expert slice (fused_expert_reader.h) read as stored, then widened or narrowed per
// element by `convert(bits pointer, dtype) -> T`.
template <typename T, typename Convert>
absl::Status ReadFusedConverted(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
                                std::span<T> out, Convert&& convert) {
  KVS_ASSIGN_OR_RETURN(WeightDtype d, internal::FusedExpertDtype(ckpt, spec));
  const size_t esize = WeightDtypeBytes(d);
  std::vector<std::byte> raw(out.size() * esize);
  KVS_RETURN_IF_ERROR(internal::ReadFusedExpert(ckpt, spec, d, raw));
  for (size_t i = 0; i < out.size(); ++i) out[i] = convert(raw.data() + i * esize, d);
  return absl::OkStatus();
}

float BitsToFloat(const std::byte* p, WeightDtype d) {
  if (d == WeightDtype::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return d == WeightDtype::kBf16 ? kernels::cpu::Bf16ToFloat(b) : kernels::cpu::HalfToFloat(b);
}

}  // namespace

absl::Status CheckShape(const TensorFile& file, const SafetensorsEntry& entry, const WeightSpec& spec, size_t i) {
  const std::vector<int64_t> want = spec.cols == 1 && entry.shape.size() == 1
                                        ? std::vector<int64_t>{spec.row_counts[i]}
                                        : std::vector<int64_t>{spec.row_counts[i], spec.cols};
  if (entry.shape != want) {
    return TensorError(file, entry.name,
                       absl::StrCat("shape [", absl::StrJoin(entry.shape, ", "), "], expected [",
                                    absl::StrJoin(want, ", "), "] (from the model's configuration)"));
  }
  return absl::OkStatus();
}

void UnpermuteHeadRows(std::span<const std::byte> stored, int64_t rows, int32_t heads, std::span<std::byte> out) {
  KVS_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, "head permutation: rows per head");
  KVS_CHECK(out.size() == stored.size() && stored.size() % static_cast<size_t>(rows) == 0,
            "head permutation: sizes");
  const size_t row_bytes = stored.size() / static_cast<size_t>(rows);
  const int64_t d = rows / heads, half = d / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        const auto src = static_cast<size_t>(h * d + 2 * i + j), dst = static_cast<size_t>(h * d + j * half + i);
        std::memcpy(out.data() + dst * row_bytes, stored.data() + src * row_bytes, row_bytes);
      }
    }
  }
}

size_t WeightDtypeBytes(WeightDtype d) { return d == WeightDtype::kF32 ? 4 : 2; }

const char* WeightDtypeName(WeightDtype d) {
  switch (d) {
    case WeightDtype::kF32: return "F32";
    case WeightDtype::kBf16: return "BF16";
    case WeightDtype::kF16: return "F16";
  }
  return "?";
}

absl::StatusOr<WeightDtype> SpecDtype(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec) {
  KVS_CHECK(spec.present(), "SpecDtype of an absent weight");
  if (spec.fused.layout != FusedLayout::kNone) return internal::FusedExpertDtype(ckpt, spec);
  std::optional<WeightDtype> dtype;
  for (const std::string& name : spec.names) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    KVS_ASSIGN_OR_RETURN(WeightDtype d, DtypeOf(*found.first, *found.second));
    if (dtype && *dtype != d) {
      return TensorError(*found.first, name,
                         absl::StrCat("is ", WeightDtypeName(d), " but ", spec.names.front(), " is ",
                                      WeightDtypeName(*dtype), "; tensors read as one matrix must share a dtype"));
    }
    dtype = d;
  }
  return *dtype;
}

absl::Status ReadRaw(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, WeightDtype dtype,
                     std::span<std::byte> out) {
  const size_t esize = WeightDtypeBytes(dtype);
  KVS_CHECK(out.size() == static_cast<size_t>(spec.elements()) * esize, "ReadRaw: destination size");
  if (spec.fused.layout != FusedLayout::kNone)
    return internal::ReadFusedExpert(ckpt, spec, dtype, out);
  return ForEachTensor(ckpt, spec,
                       [&](const TensorFile& f, const SafetensorsEntry& e, WeightDtype d,
                           std::span<const std::byte> bytes, int64_t row) -> absl::Status {
                         if (d != dtype) {
                           return TensorError(f, e.name, absl::StrCat("is ", WeightDtypeName(d), ", expected ",
                                                                      WeightDtypeName(dtype)));
                         }
                         std::memcpy(out.data() + static_cast<size_t>(row * spec.cols) * esize, bytes.data(),
                                     bytes.size());
                         f.Release(e);
                         return absl::OkStatus();
                       });
}

absl::Status ReadF32(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, std::span<float> out) {
  KVS_CHECK(out.size() == static_cast<size_t>(spec.elements()), "ReadF32: destination size");
  if (spec.fused.layout != FusedLayout::kNone)
    return ReadFusedConverted(ckpt, spec, out, BitsToFloat);
  return ForEachTensor(ckpt, spec,
                       [&](const TensorFile& f, const SafetensorsEntry& e, WeightDtype d,
                           std::span<const std::byte> bytes, int64_t row) -> absl::Status {
                         float* dst = out.data() + row * spec.cols;
                         const int64_t n = e.num_elements();
                         if (d == WeightDtype::kF32) {
                           std::memcpy(dst, bytes.data(), bytes.size());
                         } else {
                           for (int64_t i = 0; i < n; ++i) {
                             uint16_t b;
                             std::memcpy(&b, bytes.data() + 2 * i, 2);
                             dst[i] = d == WeightDtype::kBf16 ? kernels::cpu::Bf16ToFloat(b)
                                                              : kernels::cpu::HalfToFloat(b);
                           }
                         }
                         f.Release(e);
                         return absl::OkStatus();
                       });
}

absl::Status ReadBf16(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, std::span<uint16_t> out) {
  KVS_CHECK(out.size() == static_cast<size_t>(spec.elements()), "ReadBf16: destination size");
  if (spec.fused.layout != FusedLayout::kNone) {
    return ReadFusedConverted(ckpt, spec, out, [](const std::byte* p, WeightDtype d) {
      if (d == WeightDtype::kBf16) {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return b;
      }
      return kernels::cpu::FloatToBf16(BitsToFloat(p, d));
    });
  }
  return ForEachTensor(ckpt, spec,
                       [&](const TensorFile& f, const SafetensorsEntry& e, WeightDtype d,
                           std::span<const std::byte> bytes, int64_t row) -> absl::Status {
                         uint16_t* dst = out.data() + row * spec.cols;
                         const int64_t n = e.num_elements();
                         if (d == WeightDtype::kBf16) {
                           std::memcpy(dst, bytes.data(), bytes.size());
                         } else {
                           for (int64_t i = 0; i < n; ++i) {
                             float x;
                             if (d == WeightDtype::kF32) {
                               std::memcpy(&x, bytes.data() + 4 * i, 4);
                             } else {
                               uint16_t b;
                               std::memcpy(&b, bytes.data() + 2 * i, 2);
                               x = kernels::cpu::HalfToFloat(b);
                             }
                             dst[i] = kernels::cpu::FloatToBf16(x);
                           }
                         }
                         f.Release(e);
                         return absl::OkStatus();
                       });
}

absl::StatusOr<std::span<const std::byte>> MappedTensor(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
                                                        WeightDtype dtype) {
  if (spec.names.size() != 1 || spec.fused.layout != FusedLayout::kNone) {
    return absl::InvalidArgumentError("MappedTensor: one whole tensor expected");
  }
  std::span<const std::byte> out;
  KVS_RETURN_IF_ERROR(ForEachTensor(ckpt, spec,
                                    [&](const TensorFile& f, const SafetensorsEntry& e, WeightDtype d,
                                        std::span<const std::byte> bytes, int64_t) -> absl::Status {
                                      if (d != dtype) {
                                        return TensorError(f, e.name, absl::StrCat("is ", WeightDtypeName(d),
                                                                                   ", expected ",
                                                                                   WeightDtypeName(dtype)));
                                      }
                                      out = bytes;
                                      return absl::OkStatus();
                                    }));
  return out;
}

void ReleaseTensors(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec) {
  for (const std::string& name : spec.names) {
    auto found = ckpt.Find(name);
    if (found.ok()) found->first->Release(*found->second);
  }
  if (!spec.fused.scales_name.empty()) {
    auto found = ckpt.Find(spec.fused.scales_name);
    if (found.ok()) found->first->Release(*found->second);
  }
}

}  // namespace kvserve::model
