// Physical KV memory behind an interface: the block pool and the cache manager deal in block
// ids only; a KvStorage holds the bytes in the layout of cache/kv_layout.h. The host
// implementation (host_kv_storage.h) backs the CPU runner, the swap tier and the tests; a
// CUDA implementation comes with the CUDA issue. No CUDA types here.
//
//   layer_data(l):   [num_blocks][2][num_kv_heads][block_size][head_dim]  dtype elements
//   layer_scales(l): [num_blocks][2][num_kv_heads][block_size]           floats (fp8/int8)
//
// Ordering contract for copies: the cache manager returns copy lists (copy-on-write,
// swap-out, swap-in) whose blocks may be reused by the very next manager call. The caller
// executes every list in the order the manager returned them, and all of them before the
// next forward pass (on a GPU: enqueued on one stream in that order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "cache/cache_types.h"
#include "cache/kv_layout.h"

namespace kvserve::cache {

class KvStorage {
 public:
  virtual ~KvStorage() = default;

  virtual const KvLayout& layout() const = 0;
  virtual int32_t num_blocks() const = 0;

  // Whole-block copies inside this storage (copy-on-write): every layer, K and V, data and
  // scales. InvalidArgument if an id is out of range.
  virtual absl::Status copy_blocks(std::span<const BlockCopy> copies) = 0;
  // Whole-block copies from this storage (src ids) into `dst` (dst ids), which must have the
  // same layout: swap-out (device -> host tier) and swap-in (host tier -> device).
  virtual absl::Status copy_blocks_to(KvStorage& dst, std::span<const BlockCopy> copies) = 0;
  // Zeroes whole blocks (data and scales).
  virtual absl::Status zero_blocks(std::span<const BlockId> blocks) = 0;

  // Host-addressable base pointers of one layer, for CPU kernels; null when the memory is
  // not host-addressable (device memory). layer_scales is null for unscaled dtypes.
  virtual std::byte* layer_data(int layer) = 0;
  virtual float* layer_scales(int layer) = 0;
  virtual const std::byte* layer_data(int layer) const = 0;
  virtual const float* layer_scales(int layer) const = 0;

  bool host_addressable() const { return layout().num_layers == 0 || layer_data(0) != nullptr; }
};

}  // namespace kvserve::cache
