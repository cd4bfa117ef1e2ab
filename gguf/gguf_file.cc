// GgufFile: one memory-mapped GGUF file, validated by ParseGgufLayout (gguf_layout.cc)
// before anything else may look at it. The mapping is read-only and private, so tensor
// bytes are handed out as views into it; paging hints (madvise) let a loader stream a file
// larger than memory: WillNeed before copying a tensor, Release after.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "gguf/gguf_file.h"

namespace kvserve::gguf {

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 24) {  // magic, version, two counts
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", size, " bytes, too short for a GGUF header"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = static_cast<const std::byte*>(map);
  f->map_size_ = size;
  KVS_ASSIGN_OR_RETURN(f->layout_, ParseGgufLayout(path, {f->map_, f->map_size_}));
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

std::span<const std::byte> GgufFile::Bytes(const TensorInfo& t) const {
  // Validated: data_offset + offset + bytes <= map_size_ for every tensor of the layout.
  KVS_DCHECK(layout_.data_offset + t.offset + t.bytes <= map_size_, t.name);
  return {map_ + layout_.data_offset + t.offset, static_cast<size_t>(t.bytes)};
}

namespace {
// Advises the page-aligned span covering [begin, end) of the map.
void Advise(const std::byte* map, size_t map_size, const std::byte* begin, const std::byte* end,
            int advice) {
  if (end <= begin) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(begin) / page * page;
  const auto hi =
      std::min(reinterpret_cast<uintptr_t>(end), reinterpret_cast<uintptr_t>(map) + map_size);
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, advice);  // a hint: failure changes nothing
}
}  // namespace

void GgufFile::WillNeed(const TensorInfo& t) const {
  const auto bytes = Bytes(t);
  Advise(map_, map_size_, bytes.data(), bytes.data() + bytes.size(), MADV_WILLNEED);
}

// A read-only private mapping never dirtied: dropped pages fault back in from the page
// cache on the next read, so Release is always safe.
void GgufFile::Release(const TensorInfo& t) const {
  const auto bytes = Bytes(t);
  Advise(map_, map_size_, bytes.data(), bytes.data() + bytes.size(), MADV_DONTNEED);
}

}  // namespace kvserve::gguf
