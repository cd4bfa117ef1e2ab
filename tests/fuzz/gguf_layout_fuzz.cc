// libFuzzer target: a GGUF file from arbitrary bytes, through ParseGgufLayout. Every input
// either gives a layout or a clean InvalidArgument; nothing may crash, leak, trip a
// sanitizer or allocate beyond what the input holds. An accepted layout must hold what
// GgufFile relies on when it hands out tensor bytes, checked here independently in 128 bits:
// every tensor lies inside the file, at an aligned offset, after the previous one, with
// bytes = rows x (ne[0] / block) x block bytes. Accepted files are then opened for real
// (memfd), every tensor's first and last byte read, and written back through GgufWriter:
// the copy must parse to the same layout.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "quant/block_type.h"

namespace {

__extension__ typedef unsigned __int128 U128;

void CheckLayout(const kvserve::gguf::GgufLayout& layout, size_t size) {
  if (layout.alignment == 0 || (layout.alignment & (layout.alignment - 1)) != 0) __builtin_trap();
  if (layout.data_offset % layout.alignment != 0) __builtin_trap();
  std::set<std::string> names;
  U128 next = 0;
  for (const auto& t : layout.tensors) {
    if (!names.insert(t.name).second) __builtin_trap();
    if (t.ne.empty() || t.ne.size() > 4) __builtin_trap();
    const auto& traits = kvserve::quant::Traits(t.type);
    U128 rows = 1;
    for (size_t d = 0; d < t.ne.size(); ++d) {
      if (t.ne[d] < 0) __builtin_trap();
      if (d > 0) rows *= static_cast<U128>(t.ne[d]);
    }
    if (t.ne[0] % traits.block_elements != 0) __builtin_trap();
    const U128 bytes = rows * static_cast<U128>(t.ne[0] / traits.block_elements) *
                       static_cast<U128>(traits.block_bytes);
    if (bytes != t.bytes) __builtin_trap();
    if (t.offset % layout.alignment != 0 || t.offset < next) __builtin_trap();
    if (static_cast<U128>(layout.data_offset) + t.offset + t.bytes > size) __builtin_trap();
    next = static_cast<U128>(t.offset) + t.bytes;
    (void)t.rows();  // must not overflow (UBSan)
    (void)t.num_elements();
  }
}

bool SameLayout(const kvserve::gguf::GgufLayout& a, const kvserve::gguf::GgufLayout& b) {
  if (a.alignment != b.alignment || a.tensors.size() != b.tensors.size()) return false;
  if (a.metadata.size() != b.metadata.size()) return false;
  for (const auto& [key, value] : a.metadata) {
    auto it = b.metadata.find(key);
    if (it == b.metadata.end() || it->second.type != value.type) return false;
    if (value.type == kvserve::gguf::ValueType::kArray &&
        it->second.array_type != value.array_type) {
      return false;
    }
    // NaN payloads compare unequal as doubles; compare the variants' bytes through ==
    // only where no NaN can be involved.
    if (value.type != kvserve::gguf::ValueType::kF32 &&
        value.type != kvserve::gguf::ValueType::kF64 &&
        value.type != kvserve::gguf::ValueType::kArray && !(it->second.v == value.v)) {
      return false;
    }
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& x = a.tensors[i];
    const auto& y = b.tensors[i];
    if (x.name != y.name || x.type != y.type || x.ne != y.ne || x.bytes != y.bytes) return false;
  }
  return true;
}

int MemFile(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (written != size) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto layout = kvserve::gguf::ParseGgufLayout("fuzz.gguf", file);
  if (!layout.ok()) {
    if (layout.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  CheckLayout(*layout, size);

  // The same bytes through the file path (mmap, Bytes).
  const int fd = MemFile(data, size);
  if (fd < 0) return 0;
  auto opened = kvserve::gguf::GgufFile::Open("/proc/self/fd/" + std::to_string(fd));
  close(fd);
  if (!opened.ok()) {
    if (size >= 24) __builtin_trap();  // the layout was accepted above (Open wants a header)
    return 0;
  }
  unsigned sum = 0;
  for (const auto& t : (*opened)->layout().tensors) {
    const auto bytes = (*opened)->Bytes(t);
    if (bytes.size() != t.bytes) __builtin_trap();
    if (!bytes.empty())
      sum += static_cast<unsigned>(bytes.front()) + static_cast<unsigned>(bytes.back());
  }
  (void)sum;

  // Written back (where the writer's rules allow: it writes split.* keys itself), the copy
  // parses to the same layout.
  for (const auto& [key, value] : layout->metadata) {
    if (key.rfind("split.", 0) == 0) return 0;
  }
  if (layout->alignment > 4096) return 0;  // valid, but the copy would be mostly padding
  kvserve::gguf::GgufWriter writer(layout->alignment);
  for (const auto& [key, value] : layout->metadata) writer.Set(key, value);
  for (const auto& t : layout->tensors) {
    const auto bytes = (*opened)->Bytes(t);
    writer.AddTensor(t.name, t.type, t.ne, std::vector<std::byte>(bytes.begin(), bytes.end()));
  }
  const int out = memfd_create("fuzz_gguf_out", MFD_CLOEXEC);
  if (out < 0) return 0;
  const std::string out_path = "/proc/self/fd/" + std::to_string(out);
  auto written = writer.Write(out_path);
  if (!written.ok()) __builtin_trap();  // anything the reader accepts, the writer can write
  auto reread = kvserve::gguf::GgufFile::Open(out_path);
  close(out);
  if (!reread.ok() || !SameLayout(*layout, (*reread)->layout())) __builtin_trap();
  return 0;
}
