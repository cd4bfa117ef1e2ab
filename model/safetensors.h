// Reader for Hugging Face safetensors checkpoints: one `model.safetensors`, or shards listed
// by `model.safetensors.index.json`. Files are memory-mapped and fully validated when opened,
// before any tensor is touched:
//
//   file:  [ u64 LE: N ][ N bytes of JSON header ][ data region .......................... ]
//   header: {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [..],
//                                               "data_offsets": [begin, end]}, ...}
//   data region:  |--- t_a ---|--- t_b ---|------ t_c ------|   offsets relative to its start;
//                 tensors tile it exactly: no gaps, no overlaps, nothing past the end.
//
// Every error names the file and, where one is involved, the tensor. Tensors are converted
// to fp32 on load (F32, F16, BF16 supported; any other dtype is an error when loaded), or
// read as stored by model/tensor_reader.h, which never keeps more than one tensor resident.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::model {

struct SafetensorsEntry {
  std::string name;
  // As written: "F32", "BF16", "I64", ...; a tensor of a GGUF file (model/gguf_checkpoint.h)
  // carries its ggml block type's name ("Q4_K", "Q8_0", ...) with dtype_bytes 0: its bytes
  // are rows of blocks (quant/block_type.h).
  std::string dtype;
  size_t dtype_bytes = 0;
  std::vector<int64_t> shape;  // Hugging Face order: [out][in] for a weight matrix
  uint64_t begin = 0;          // byte range inside the data region
  uint64_t end = 0;
  // GGUF files of llama.cpp's `llama` architecture store q_proj/k_proj rows permuted per head
  // (rotate-half pairs made adjacent). With permute_heads = n > 0 the rows are read back into
  // Hugging Face order: within each of the n heads of D rows, stored row 2i + j holds row
  // j·D/2 + i. Readers (tensor_reader.h) undo it while copying; 0: rows as stored.
  int32_t permute_heads = 0;
  int64_t num_elements() const;
};

// The validated layout of a whole safetensors file held in memory: its entries (sorted by
// name) and the offset of the data region. Open() applies it to the mapped file; it is also
// what the safetensors fuzz target feeds. Errors name `path` (and the tensor).
struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;
  uint64_t data_offset = 0;  // 8 + header length
};
absl::StatusOr<SafetensorsLayout> ParseSafetensorsLayout(const std::string& path,
                                                         std::span<const std::byte> file);

// A memory-mapped file of tensors as the readers see it: a safetensors file, or a GGUF file
// presented under Hugging Face names (model/gguf_checkpoint.h).
class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual const std::string& path() const = 0;
  // Sorted by name.
  virtual const std::vector<SafetensorsEntry>& entries() const = 0;
  virtual std::span<const std::byte> Bytes(const SafetensorsEntry& e) const = 0;
  // Paging hints for the tensor's bytes: read them ahead, or drop them from this process's
  // resident set once copied (a read-only file mapping: the next read faults them back in
  // from the page cache, so Release is always safe).
  virtual void WillNeed(const SafetensorsEntry& e) const = 0;
  virtual void Release(const SafetensorsEntry& e) const = 0;
  const SafetensorsEntry* Find(std::string_view name) const;
  // Converts the tensor to fp32 into `out` (exactly num_elements floats; F32, F16, BF16).
  absl::Status ReadF32(const SafetensorsEntry& e, std::span<float> out) const;
};

// One memory-mapped, validated safetensors file.
class SafetensorsFile final : public TensorFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile() override;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const override { return path_; }
  const std::vector<SafetensorsEntry>& entries() const override { return entries_; }
  std::span<const std::byte> Bytes(const SafetensorsEntry& e) const override;
  void WillNeed(const SafetensorsEntry& e) const override;
  void Release(const SafetensorsEntry& e) const override;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_size_ = 0;
  const std::byte* data_ = nullptr;  // start of the data region inside map_
  std::vector<SafetensorsEntry> entries_;  // sorted by name
};

// A whole checkpoint directory (single file or sharded).
class SafetensorsCheckpoint {
 public:
  // Opens <dir>/model.safetensors.index.json if present (every shard it names must exist
  // and hold the tensors mapped to it), else <dir>/model.safetensors.
  static absl::StatusOr<SafetensorsCheckpoint> Open(const std::string& model_dir);
  // Opens exactly one file (tests, tools).
  static absl::StatusOr<SafetensorsCheckpoint> OpenFile(const std::string& path);
  // A checkpoint over other tensor files (GGUF, model/gguf_checkpoint.h): every entry of each
  // file is indexed; a name in two files is InvalidArgument naming both.
  static absl::StatusOr<SafetensorsCheckpoint> FromFiles(std::vector<std::unique_ptr<TensorFile>> files,
                                                         std::string description);

  bool Contains(std::string_view name) const;
  // The tensor's entry and file, or NotFound naming the tensor and where it was looked for.
  absl::StatusOr<std::pair<const TensorFile*, const SafetensorsEntry*>> Find(
      std::string_view name) const;
  // Loads `name` as fp32 after checking its shape equals `shape`; a NaN or infinite element
  // is an error naming the tensor (a corrupt checkpoint).
  absl::Status LoadF32(std::string_view name, std::span<const int64_t> shape,
                       std::span<float> out) const;
  std::vector<std::string> TensorNames() const;
  const std::string& description() const { return description_; }  // the path(s) opened
  // Gemma's RMSNorm scale is stored as (1 + w) (GGUF files: llama.cpp's converter adds the 1),
  // so the loader must not add it again.
  bool norm_offset_stored() const { return norm_offset_stored_; }
  void set_norm_offset_stored(bool stored) { norm_offset_stored_ = stored; }
  // Whether any tensor is stored in a ggml block type (a GGUF file).
  bool has_block_tensors() const;

 private:
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, std::pair<const TensorFile*, const SafetensorsEntry*>, std::less<>> index_;
  std::string description_;
  bool norm_offset_stored_ = false;
};

}  // namespace kvserve::model
