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
  std::string dtype;           // as written: "F32", "BF16", "I64", ...
  size_t dtype_bytes = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0;          // byte range inside the data region
  uint64_t end = 0;
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

// One memory-mapped, validated safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* Find(std::string_view name) const;
  std::span<const std::byte> Bytes(const SafetensorsEntry& e) const;
  // Converts the tensor to fp32 into `out` (exactly num_elements floats).
  absl::Status ReadF32(const SafetensorsEntry& e, std::span<float> out) const;
  // Paging hints for the tensor's bytes: read them ahead, or drop them from this process's
  // resident set once copied (a read-only file mapping: the next read faults them back in
  // from the page cache, so Release is always safe).
  void WillNeed(const SafetensorsEntry& e) const;
  void Release(const SafetensorsEntry& e) const;

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

  bool Contains(std::string_view name) const;
  // The tensor's entry and file, or NotFound naming the tensor and where it was looked for.
  absl::StatusOr<std::pair<const SafetensorsFile*, const SafetensorsEntry*>> Find(
      std::string_view name) const;
  // Loads `name` as fp32 after checking its shape equals `shape`; a NaN or infinite element
  // is an error naming the tensor (a corrupt checkpoint).
  absl::Status LoadF32(std::string_view name, std::span<const int64_t> shape,
                       std::span<float> out) const;
  std::vector<std::string> TensorNames() const;
  const std::string& description() const { return description_; }  // the path(s) opened

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>, std::less<>> index_;
  std::string description_;
};

}  // namespace kvserve::model
