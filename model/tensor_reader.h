// Reads the weights a CheckpointMap names out of a memory-mapped checkpoint, stacked and
// checked, one spec at a time, so loading never holds more than the destination plus the
// pages of the tensor being read:
//
//   mapped file ──(WILLNEED: read ahead)──► copy/convert into the caller's buffer
//               ──(DONTNEED)──► its pages leave this process's resident set (the kernel
//                                keeps them in the page cache; nothing is freed twice)
//
// Every tensor's shape is checked against the spec and every element for NaN/infinity: a
// checkpoint that does not fit its config.json, or holds corrupt values, is refused with
// the file and tensor named. F32, BF16 and F16 are read; any other dtype is an error naming
// it (quantized checkpoints are refused, never approximated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>


#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint_map.h"
#include "model/safetensors.h"

namespace kvserve::model {

enum class WeightDtype { kF32, kBf16, kF16 };
size_t WeightDtypeBytes(WeightDtype d);
const char* WeightDtypeName(WeightDtype d);  // "F32", "BF16", "F16" (safetensors names)

// The dtype all of the spec's tensors share; mixed or unsupported dtypes are an error.
absl::StatusOr<WeightDtype> SpecDtype(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

// The stacked elements as stored (dtype = SpecDtype), spec.elements() of them.
absl::Status ReadRaw(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, WeightDtype dtype,
                     std::span<std::byte> out);
// Converted exactly to fp32.
absl::Status ReadF32(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, std::span<float> out);
// Converted to bf16 (exact for BF16 tensors, round-to-nearest-even otherwise).
absl::Status ReadBf16(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec, std::span<uint16_t> out);

// One tensor's bytes straight from the map, shape-checked against [rows][cols] (cols 1:
// a vector) and scanned for NaN/infinity; the pages stay mapped for the caller to read
// (the embedding table, whose rows are gathered per token).
absl::StatusOr<std::span<const std::byte>> MappedTensor(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec,
                                                        WeightDtype dtype);

// Whether tensor i of the spec has the spec's shape ([row_counts[i]][cols], or [rows] for a
// vector); InvalidArgument naming the file and tensor otherwise.
absl::Status CheckShape(const TensorFile& file, const SafetensorsEntry& entry, const WeightSpec& spec, size_t i);

// Copies `rows` stored rows (equal byte sizes) into Hugging Face order, undoing llama.cpp's
// per-head Q/K permutation (SafetensorsEntry::permute_heads has the rule).
void UnpermuteHeadRows(std::span<const std::byte> stored, int64_t rows, int32_t heads, std::span<std::byte> out);

// Drops the pages of the spec's tensors from the resident set (after MappedTensor's scan,
// or to undo a read ahead).
void ReleaseTensors(const SafetensorsCheckpoint& ckpt, const WeightSpec& spec);

}  // namespace kvserve::model
