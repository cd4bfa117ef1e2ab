#include "cache/kv_storage.h"

#include <sys/mman.h>

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

// calloc for zeroed memory; the 64-byte alignment is done by hand, with the pointer calloc
// returned stored just below the aligned address. The pages are then faulted in at once
// (MADV_POPULATE_WRITE, Linux 5.14+; older kernels skip it): a pool's pages are otherwise
// touched for the first time inside engine steps, where the page faults cost 7-11 % of a
// 512-token prefill on kvs-tiny (perf, docs/benchmarks.md), and the memory the pool needs is
// claimed at start-up instead of mid-serving.
absl::StatusOr<void*> PlainHostAllocator::Allocate(size_t bytes) {
  void* raw = std::calloc(bytes + kAlign + sizeof(void*), 1);
  if (raw == nullptr) return absl::ResourceExhaustedError(absl::StrCat("calloc of ", bytes, " bytes failed"));
  uintptr_t p = reinterpret_cast<uintptr_t>(raw) + sizeof(void*);
  p = (p + kAlign - 1) / kAlign * kAlign;
  std::memcpy(reinterpret_cast<void*>(p - sizeof(void*)), &raw, sizeof(void*));
#ifdef MADV_HUGEPAGE
  // Transparent huge pages where the system grants them on request (THP "madvise" mode): a
  // prompt writes its K/V into blocks the pool has not touched for a while, and with 4 KiB
  // pages every block costs its own TLB misses (under this VM's paging, far more: perf put
  // 16 % of a 512-token kvs-tiny prefill in WriteKv's copies, almost all of it first stores
  // to cold pages).
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t huge_first = (p + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t huge_end = (p + bytes) / kHugePage * kHugePage;
  if (huge_end > huge_first) (void)madvise(reinterpret_cast<void*>(huge_first), huge_end - huge_first, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  const uintptr_t first = (p + kPage - 1) / kPage * kPage;
  const uintptr_t end = (p + bytes) / kPage * kPage;
  if (end > first) (void)madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE);
#endif
  return reinterpret_cast<void*>(p);
}

void PlainHostAllocator::Free(void* p, size_t /*bytes*/) {
  if (p == nullptr) return;
  void* raw = nullptr;
  std::memcpy(&raw, static_cast<std::byte*>(p) - sizeof(void*), sizeof(void*));
  std::free(raw);
}

}  // namespace kvserve::cache
