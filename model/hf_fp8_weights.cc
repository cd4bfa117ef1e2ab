#include "model/hf_fp8_weights.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "kernels/cpu/quant/fp8_format.h"
#include "model/tensor_reader.h"
#include "quant/block_type.h"

namespace kvserve::model {
namespace {

namespace kq = kernels::cpu::quant;

absl::Status TensorError(const TensorFile& f, const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(f.path(), ": tensor \"", name, "\": ", base::AsAbsl(what)));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scales of an F8_E4M3 tensor [rows][cols] expanded to [rows][ceil(cols/128)].
absl::StatusOr<std::vector<float>> ExpandedScales(const SafetensorsCheckpoint& ckpt,
                                                  const TensorFile& wfile,
                                                  const SafetensorsEntry& weight, int64_t rows,
                                                  int64_t cols, const HfFp8Config& c) {
  const std::string module = weight.name.substr(0, weight.name.size() - 7);  // minus ".weight"
  if (c.Ignored(module)) {
    return TensorError(wfile, weight.name,
                       "is stored as F8_E4M3 but its module is listed as not quantized");
  }
  const std::string scale_name = absl::StrCat(module, ".", c.scale_suffix);
  auto found = ckpt.Find(scale_name);
  if (!found.ok()) {
    return TensorError(wfile, weight.name,
                       absl::StrCat("F8_E4M3 weights need their scales \"", scale_name, "\" (",
                                    c.Describe(), "): ", found.status().message()));
  }
  const auto& [file, e] = *found;
  // Scale rows / columns the config implies.
  const int64_t srows = c.block_rows == 0 ? 1 : CeilDiv(rows, c.block_rows);
  const int64_t scols = c.block_cols == 0 ? 1 : CeilDiv(cols, c.block_cols);
  const int64_t n = e->num_elements();
  const bool shape_ok = e->shape.size() <= 2 && n == srows * scols &&
                        (e->shape.size() < 2 || (e->shape[0] == srows && e->shape[1] == scols)) &&
                        (e->shape.size() != 1 || scols == 1);
  if (!shape_ok) {
    return TensorError(
        *file, e->name,
        absl::StrCat("shape ", ShapeText(e->shape), " does not fit ", c.Describe(), " of a [", rows,
                     ", ", cols, "] weight (", srows, " x ", scols, " scales expected)"));
  }
  std::vector<float> s(static_cast<size_t>(n));
  KVS_RETURN_IF_ERROR(file->ReadF32(*e, s));
  const int64_t kblocks = CeilDiv(cols, kq::kFp8KBlock);
  std::vector<float> out(static_cast<size_t>(rows * kblocks));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sr = c.block_rows == 0 ? 0 : r / c.block_rows;
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int64_t sc = c.block_cols == 0 ? 0 : kb * kq::kFp8KBlock / c.block_cols;
      out[static_cast<size_t>(r * kblocks + kb)] = s[static_cast<size_t>(sr * scols + sc)];
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<bool> SpecHasFp8(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec) {
  bool any = false;
  for (const std::string& name : spec.names) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    const auto& [file, e] = found;
    if (e->dtype == "F8_E5M2") {
      return TensorError(*file, e->name,
                         "dtype F8_E5M2 (float8 e5m2) weights are not supported (F8_E4M3 are)");
    }
    any = any || e->dtype == "F8_E4M3";
  }
  return any;
}

absl::StatusOr<kq::QuantMatrix> PackFp8Projection(const SafetensorsCheckpoint& ckpt,
                                                  const WeightSpec& spec,
                                                  const std::optional<HfFp8Config>& config) {
  if (spec.fused.layout != FusedLayout::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor \"", spec.names.front(), "\": fused expert tensors cannot be stored as FP8"));
  }
  KVS_CHECK(spec.names.size() == spec.row_counts.size(),
            "weight spec: names and row counts differ");
  std::vector<kq::QuantSource> segments;
  std::vector<std::vector<float>> scales;  // alive until packed
  scales.reserve(spec.names.size());
  std::vector<std::pair<const TensorFile*, const SafetensorsEntry*>> used;
  for (size_t i = 0; i < spec.names.size(); ++i) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(spec.names[i]));
    const auto& [file, entry] = found;
    KVS_RETURN_IF_ERROR(CheckShape(*file, *entry, spec, i));
    const int64_t rows = spec.row_counts[i];
    const std::span<const std::byte> bytes = file->Bytes(*entry);
    file->WillNeed(*entry);
    used.push_back(found);
    if (entry->dtype == "F8_E4M3") {
      if (!config) {
        return TensorError(*file, entry->name,
                           "is stored as F8_E4M3 but config.json has no FP8 quantization_config "
                           "(its scales are undefined)");
      }
      if (!entry->name.ends_with(".weight")) {
        return TensorError(*file, entry->name, "an F8_E4M3 tensor must be a module's .weight");
      }
      KVS_ASSIGN_OR_RETURN(std::vector<float> s,
                           ExpandedScales(ckpt, *file, *entry, rows, spec.cols, *config));
      scales.push_back(std::move(s));
      kq::QuantSource src{};
      src.data = bytes.data();
      src.rows = rows;
      src.row_stride = spec.cols;
      src.fp8_scales = scales.back().data();
      segments.push_back(src);
      continue;
    }
    const auto traits = quant::FindBlockTypeByName(entry->dtype);
    if (!traits || traits->quantized || entry->dtype_bytes == 0) {
      return TensorError(
          *file, entry->name,
          absl::StrCat("dtype ", entry->dtype,
                       " cannot be stacked with F8_E4M3 tensors (F32, F16, BF16 can)"));
    }
    segments.push_back(
        {traits->type, bytes.data(), rows, spec.cols * static_cast<int64_t>(entry->dtype_bytes)});
  }
  auto packed = kq::QuantMatrix::Pack(segments, spec.cols);
  for (const auto& [file, entry] : used) file->Release(*entry);
  if (!packed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", spec.names.front(), "\": ", packed.status().message()));
  }
  return packed;
}

}  // namespace kvserve::model
