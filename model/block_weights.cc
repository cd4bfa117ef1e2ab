#include "model/block_weights.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "model/tensor_reader.h"

namespace kvserve::model {
namespace {

namespace kq = kernels::cpu::quant;

absl::Status TensorError(const TensorFile& f, const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(f.path(), ": tensor \"", name, "\": ", base::AsAbsl(what)));
}

absl::Status RefuseFused(const WeightSpec& spec) {
  if (spec.fused.layout == FusedLayout::kNone) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor \"", spec.names.front(), "\": fused expert tensors cannot be stored in blocks"));
}

}  // namespace

absl::StatusOr<quant::BlockType> EntryBlockType(const TensorFile& file,
                                                const SafetensorsEntry& entry) {
  const auto traits = quant::FindBlockTypeByName(entry.dtype);
  if (!traits) {
    return TensorError(file, entry.name, absl::StrCat("dtype ", entry.dtype, " is not supported"));
  }
  return traits->type;
}

absl::StatusOr<bool> SpecHasBlocks(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec) {
  for (const std::string& name : spec.names) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    if (found.second->dtype_bytes == 0) {
      KVS_RETURN_IF_ERROR(RefuseFused(spec));
      return true;
    }
  }
  return false;
}

absl::StatusOr<size_t> StoredBytes(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec) {
  size_t bytes = 0;
  for (const std::string& name : spec.names) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    bytes += static_cast<size_t>(found.second->end - found.second->begin);
  }
  return bytes;
}

absl::StatusOr<kq::QuantMatrix> PackBlockProjection(const SafetensorsCheckpoint& ckpt,
                                                    const WeightSpec& spec) {
  KVS_RETURN_IF_ERROR(RefuseFused(spec));
  KVS_CHECK(spec.names.size() == spec.row_counts.size(),
            "weight spec: names and row counts differ");
  std::vector<kq::QuantSource> segments;
  std::vector<std::vector<std::byte>> unpermuted;  // copies of permuted tensors, alive until packed
  std::vector<std::vector<int32_t>> orders;        // input orders, alive until packed
  std::vector<std::pair<const TensorFile*, const SafetensorsEntry*>> used;
  for (size_t i = 0; i < spec.names.size(); ++i) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(spec.names[i]));
    const auto& [file, entry] = found;
    KVS_RETURN_IF_ERROR(CheckShape(*file, *entry, spec, i));
    KVS_ASSIGN_OR_RETURN(quant::BlockType type, EntryBlockType(*file, *entry));
    auto row_bytes = quant::RowBytes(type, spec.cols);
    if (!row_bytes.ok())
      return TensorError(*file, entry->name, base::AsStd(row_bytes.status().message()));
    const int64_t rows = spec.row_counts[i];
    std::span<const std::byte> bytes = file->Bytes(*entry);
    if (bytes.size() != static_cast<size_t>(rows * *row_bytes)) {
      return TensorError(*file, entry->name,
                         absl::StrCat("holds ", bytes.size(), " bytes, ", rows, " rows of ",
                                      *row_bytes, " expected"));
    }
    file->WillNeed(*entry);
    if (entry->permute_heads > 0) {
      std::vector<std::byte>& copy = unpermuted.emplace_back(bytes.size());
      UnpermuteHeadRows(bytes, rows, entry->permute_heads, copy);
      bytes = copy;
    }
    kq::QuantSource src{type, bytes.data(), rows, *row_bytes};
    // ---- act-order input order (hf_quant_checkpoint.h) ----
    const std::string order_name = spec.names[i] + std::string(kInputOrderSuffix);
    if (ckpt.Contains(order_name)) {
      KVS_ASSIGN_OR_RETURN(auto o, ckpt.Find(order_name));
      const std::span<const std::byte> ob = o.first->Bytes(*o.second);
      if (o.second->dtype != "I32" || ob.size() != static_cast<size_t>(4 * spec.cols)) {
        return TensorError(*o.first, order_name, absl::StrCat("expected I32 [", spec.cols, "]"));
      }
      std::vector<int32_t>& order = orders.emplace_back(static_cast<size_t>(spec.cols));
      std::memcpy(order.data(), ob.data(), ob.size());
      src.input_order = order.data();
    }
    segments.push_back(src);
    used.push_back(found);
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
