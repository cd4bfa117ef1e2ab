// Physical KV memory behind an interface: the block pool and the cache manager deal in block
// ids only; a KvStorage holds the bytes in the layout of cache/kv_layout.h. The host
// implementation (host_kv_storage.h) backs the CPU runner, the swap tier and the tests; the
// CUDA implementation lives with the CUDA backend. No CUDA types here.
//
//   layer_data(l):   [num_blocks][2][num_kv_heads][block_size][head_dim]  dtype elements
//   layer_scales(l): [num_blocks][2][num_kv_heads][block_size]           floats (fp8/int8)
//
// Memory space. Every storage says where its bytes live (memory_space()); only kHost storages
// hand out pointers (layer_data / layer_scales), which CPU kernels and CPU-side tools use.
// A kDevice storage returns null there; code that needs its contents goes through the
// backend's own kernels or copies blocks into a host storage.
//
// Copies between two storages. `a.copy_blocks_to(b, copies)` and `b.copy_blocks_from(a,
// copies)` mean the same thing, so the runner writes swap-out and swap-in the same way
// whatever the memory spaces are:
//
//   swap-out:  device.copy_blocks_to(host_tier, plan.swap_out)
//   swap-in:   device.copy_blocks_from(host_tier, plan.swap_in)
//
// Who executes a copy: a device storage whenever one side is device memory (it owns the
// stream and the copy engine); host to host is a memcpy. A host storage asked to copy to or
// from device memory forwards the call to the device side.
//
// Ordering contract. Each storage has one ordered queue of work (its stream; on the host the
// queue is the calling thread, so every call has finished when it returns). Copies and zeroing
// run in the order they were issued; a copy between two storages is issued on the device
// side's queue. The cache manager returns copy lists (copy-on-write, swap-out, swap-in) whose
// blocks may be reused by the very next manager call; the caller issues every list in the
// order the manager returned them and all of them before the next forward pass, which runs on
// the same queue. synchronize() waits for everything issued so far: call it before host code
// reads a host storage that a device queue writes into (swap-out), and before freeing memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/cache_types.h"
#include "cache/kv_layout.h"

namespace kvserve::cache {

enum class MemorySpace : uint8_t {
  kHost,    // ordinary or pinned host memory: layer_data() is a valid pointer
  kDevice,  // accelerator memory: layer_data() is null
};
std::string_view MemorySpaceName(MemorySpace space);

class KvStorage {
 public:
  virtual ~KvStorage() = default;

  virtual const KvLayout& layout() const = 0;
  virtual int32_t num_blocks() const = 0;
  virtual MemorySpace memory_space() const = 0;

  // Whole-block copies inside this storage (copy-on-write): every layer, K and V, data and
  // scales. InvalidArgument if an id is out of range.
  virtual absl::Status copy_blocks(std::span<const BlockCopy> copies) = 0;
  // Whole-block copies from this storage (src ids) into `dst` (dst ids), which must have the
  // same layout. InvalidArgument on a layout mismatch or an id out of range (nothing copied).
  virtual absl::Status copy_blocks_to(KvStorage& dst, std::span<const BlockCopy> copies) = 0;
  // The same copy seen from the destination: from `src` (src ids) into this storage.
  virtual absl::Status copy_blocks_from(KvStorage& src, std::span<const BlockCopy> copies) = 0;
  // Zeroes whole blocks (data and scales).
  virtual absl::Status zero_blocks(std::span<const BlockId> blocks) = 0;
  // Waits until every copy and zeroing issued on this storage's queue has finished.
  virtual absl::Status synchronize() = 0;

  // Host-addressable base pointers of one layer, for CPU kernels; null when the memory is
  // not host-addressable (device memory). layer_scales is null for unscaled dtypes.
  virtual std::byte* layer_data(int layer) = 0;
  virtual float* layer_scales(int layer) = 0;
  virtual const std::byte* layer_data(int layer) const = 0;
  virtual const float* layer_scales(int layer) const = 0;

  bool host_addressable() const { return memory_space() == MemorySpace::kHost; }
};

// Checks shared by every implementation of a copy from `src` to `dst`: identical layouts and
// every id in range. InvalidArgument naming the problem; OK means the copy may proceed.
absl::Status CheckBlockCopies(const KvStorage& src, const KvStorage& dst, std::span<const BlockCopy> copies);

// Raw memory for host-addressable storages. The default is ordinary zero-filled host memory;
// the CUDA backend injects pinned (page-locked) memory for the swap tier so that host<->device
// copies run asynchronously at full bus speed.
class HostMemoryAllocator {
 public:
  virtual ~HostMemoryAllocator() = default;
  // Zero-filled memory of at least `bytes`, aligned to 64 bytes; ResourceExhausted if none.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* p, size_t bytes) = 0;
  virtual std::string_view name() const = 0;  // for logs: "host", "pinned-host"
};

// calloc-backed: large blocks come straight from mmap as zero pages, so an unused pool costs no
// resident memory.
class PlainHostAllocator final : public HostMemoryAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p, size_t bytes) override;
  std::string_view name() const override { return "host"; }
};

}  // namespace kvserve::cache
