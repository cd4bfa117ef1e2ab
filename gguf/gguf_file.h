// Reader for GGUF files (llama.cpp's model container, version 3; v2 read too), memory-mapped
// and fully validated when opened, before any tensor is touched:
//
//   [ "GGUF" | u32 version | u64 tensor_count | u64 kv_count ]
//   [ kv_count × (string key, u32 value type, value) ]          metadata: typed scalars,
//   [ tensor_count × (string name, u32 n_dims, i64 ne[n_dims],   strings and arrays
//                     u32 ggml type, u64 offset) ]               ne innermost first
//   [ zero padding to general.alignment (default 32) ]
//   [ tensor data: tensor i at data_start + offset_i ]            offsets aligned, in order,
//                                                                 tiling the data region
//
// A model may come split across files `<stem>-00001-of-0000N.gguf` (split.no / split.count /
// split.tensors.count); GgufModel opens all of them and presents one tensor index and the
// first file's metadata. Every error names the file and, where one is involved, the key or
// the tensor. Unknown tensor types are refused by their ggml id; sizes are overflow-checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "quant/block_type.h"

namespace kvserve::gguf {

// GGUF metadata value types (`enum gguf_type`).
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Integers of any width are held as int64/uint64, floats as double;
// `type` keeps the stored type so a writer can round-trip it. Arrays of scalars/strings are
// held flat (nested arrays are refused: no model metadata uses them).
struct Value {
  ValueType type = ValueType::kU32;
  ValueType array_type = ValueType::kU32;  // element type when type == kArray
  std::variant<int64_t, uint64_t, double, bool, std::string,
               std::vector<int64_t>, std::vector<uint64_t>, std::vector<double>, std::vector<bool>,
               std::vector<std::string>>
      v;
};
// "u8", "i32", "f32", "bool", "string", "array", ... (ValueType's GGUF spelling), for errors.
std::string_view ValueTypeName(ValueType t);
// "u32", or "array of string" for an array.
std::string DescribeValueType(const Value& v);

struct TensorInfo {
  std::string name;
  quant::BlockType type;
  std::vector<int64_t> ne;   // innermost first: a PyTorch [out][in] weight is ne = {in, out}
  uint64_t offset = 0;       // within its file's data region
  uint64_t bytes = 0;        // rows × RowBytes(type, ne[0])
  int64_t rows() const;      // product of ne[1..]
  int64_t num_elements() const;
};

// The validated layout of one GGUF file held in memory (what the fuzz target feeds).
struct GgufLayout {
  uint32_t version = 3;
  std::map<std::string, Value, std::less<>> metadata;
  std::vector<TensorInfo> tensors;  // in file order
  uint64_t alignment = 32;
  uint64_t data_offset = 0;         // start of the data region within the file
};
absl::StatusOr<GgufLayout> ParseGgufLayout(const std::string& path, std::span<const std::byte> file);

// One memory-mapped, validated GGUF file.
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufLayout& layout() const { return layout_; }
  uint64_t size() const { return map_size_; }  // bytes of the whole file
  std::span<const std::byte> Bytes(const TensorInfo& t) const;
  // Paging hints, as SafetensorsFile's: read ahead, or drop from the resident set once copied.
  void WillNeed(const TensorInfo& t) const;
  void Release(const TensorInfo& t) const;

 private:
  GgufFile() = default;
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_size_ = 0;
  GgufLayout layout_;
};

// A model: one .gguf file, a directory holding exactly one model (one file, or one complete
// set of split files), or the first split file of a set.
class GgufModel {
 public:
  static absl::StatusOr<GgufModel> Open(const std::string& path);

  // The first file's metadata (split files repeat only the split.* keys after the first).
  const std::map<std::string, Value, std::less<>>& metadata() const;
  const Value* Find(std::string_view key) const;
  // Typed getters: NotFound naming the key when absent, InvalidArgument naming the key and
  // both types when it has another type (any integer type converts to a wider one).
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // f32/f64 (and integers)
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStrings(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloats(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(std::string_view key) const;

  struct Tensor {
    const GgufFile* file;
    const TensorInfo* info;
  };
  // The tensor, or NotFound naming it and the file(s).
  absl::StatusOr<Tensor> FindTensor(std::string_view name) const;
  bool Contains(std::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted
  const std::string& description() const { return description_; }  // the path(s) opened
  uint64_t file_bytes() const;  // all files together
  const std::vector<std::unique_ptr<GgufFile>>& files() const { return files_; }  // split order

 private:
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::map<std::string, Tensor, std::less<>> index_;
  std::string description_;
};

}  // namespace kvserve::gguf
