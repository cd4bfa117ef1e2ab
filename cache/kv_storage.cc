#include "cache/kv_storage.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve::cache {
namespace {

constexpr size_t kAlign = 64;

}  // namespace

std::string_view MemorySpaceName(MemorySpace space) {
  switch (space) {
    case MemorySpace::kHost:
      return "host";
    case MemorySpace::kDevice:
      return "device";
  }
  return "?";
}

absl::Status CheckBlockCopies(const KvStorage& src, const KvStorage& dst, std::span<const BlockCopy> copies) {
  const KvLayout& s = src.layout();
  const KvLayout& d = dst.layout();
  if (!SameKvLayout(s, d)) {
    return absl::InvalidArgumentError("block copy between storages of different layouts");
  }
  for (const BlockCopy& c : copies) {
    if (c.src.value() < 0 || c.src.value() >= src.num_blocks() || c.dst.value() < 0 ||
        c.dst.value() >= dst.num_blocks()) {
      return absl::InvalidArgumentError(absl::StrCat("block copy ", c.src.value(), " -> ", c.dst.value(),
                                                     " out of range (", src.num_blocks(), " -> ",
                                                     dst.num_blocks(), " blocks)"));
    }
  }
  return absl::OkStatus();
}

// calloc for lazily zeroed pages; the 64-byte alignment is done by hand, with the pointer
// calloc returned stored just below the aligned address.
absl::StatusOr<void*> PlainHostAllocator::Allocate(size_t bytes) {
  void* raw = std::calloc(bytes + kAlign + sizeof(void*), 1);
  if (raw == nullptr) return absl::ResourceExhaustedError(absl::StrCat("calloc of ", bytes, " bytes failed"));
  uintptr_t p = reinterpret_cast<uintptr_t>(raw) + sizeof(void*);
  p = (p + kAlign - 1) / kAlign * kAlign;
  std::memcpy(reinterpret_cast<void*>(p - sizeof(void*)), &raw, sizeof(void*));
  return reinterpret_cast<void*>(p);
}

void PlainHostAllocator::Free(void* p, size_t /*bytes*/) {
  if (p == nullptr) return;
  void* raw = nullptr;
  std::memcpy(&raw, static_cast<std::byte*>(p) - sizeof(void*), sizeof(void*));
  std::free(raw);
}

}  // namespace kvserve::cache
