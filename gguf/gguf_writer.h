// Writes GGUF v3 files: what our tests generate their fixtures with and what
// `kvserve export-gguf` writes. Metadata keys keep insertion order; tensors are written in
// the order added, each aligned to `alignment` (general.alignment is written when it is not
// the default 32). Split output (`-00001-of-0000N.gguf`) when max_file_bytes is set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gguf/gguf_file.h"

namespace kvserve::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  void Set(std::string key, Value value);
  // Convenience setters.
  void SetString(std::string key, std::string v);
  void SetU32(std::string key, uint32_t v);
  void SetI32(std::string key, int32_t v);
  void SetF32(std::string key, float v);
  void SetBool(std::string key, bool v);
  void SetStrings(std::string key, std::vector<std::string> v);
  void SetF32s(std::string key, std::vector<float> v);
  void SetI32s(std::string key, std::vector<int32_t> v);
  // `data` holds rows × RowBytes(type, ne[0]) bytes, already in `type`'s block layout.
  void AddTensor(std::string name, quant::BlockType type, std::vector<int64_t> ne,
                 std::vector<std::byte> data);
  // One file, or split files of at most max_file_bytes of tensor data each (0: one file).
  // Split files are named <path less .gguf>-0000K-of-0000N.gguf; a model that fits in one
  // file is written to `path` itself, without split keys. Everything is validated before
  // anything is written (InvalidArgument naming the key or tensor). Returns the paths written.
  absl::StatusOr<std::vector<std::string>> Write(const std::string& path, uint64_t max_file_bytes = 0) const;

 private:
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  struct Pending {
    std::string name;
    quant::BlockType type;
    std::vector<int64_t> ne;
    std::vector<std::byte> data;
  };
  std::vector<Pending> tensors_;
};

}  // namespace kvserve::gguf
