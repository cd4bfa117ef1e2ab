// libFuzzer target: a safetensors file (8-byte header length, JSON header, data region) from
// arbitrary bytes, through ParseSafetensorsLayout. Every input either gives a layout or a clean
// InvalidArgument; nothing may crash, leak or trip a sanitizer. An accepted layout must hold
// what SafetensorsFile relies on when it hands out tensor bytes: every tensor lies inside the
// data region and its byte range is exactly elements x dtype size (computed here in 128 bits,
// so a wrapped product cannot hide). Accepted files are also opened for real (memfd) and every
// small F32/F16/BF16 tensor is read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto layout = kvserve::model::ParseSafetensorsLayout("fuzz.safetensors", file);
  if (!layout.ok()) {
    if (layout.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  const uint64_t data_size = size - layout->data_offset;
  for (const auto& e : layout->entries) {
    unsigned __int128 elems = 1;
    for (int64_t d : e.shape) {
      if (d < 0) __builtin_trap();
      elems *= static_cast<unsigned __int128>(d);
      if (elems > (static_cast<unsigned __int128>(1) << 100)) __builtin_trap();
    }
    if (e.begin > e.end || e.end > data_size) __builtin_trap();
    if (static_cast<unsigned __int128>(e.end - e.begin) != elems * e.dtype_bytes) __builtin_trap();
  }
  // The same bytes through the file path (mmap, Find, ReadF32).
  const int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (written == size) {
    auto opened = kvserve::model::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
    if (!opened.ok()) __builtin_trap();  // the layout was accepted above
    for (const auto& e : (*opened)->entries()) {
      if ((*opened)->Find(e.name) == nullptr) __builtin_trap();
      if (e.num_elements() > (1 << 16)) continue;
      std::vector<float> out(static_cast<size_t>(e.num_elements()));
      (void)(*opened)->ReadF32(e, out);  // other dtypes: a clean error
    }
  }
  close(fd);
  return 0;
}
