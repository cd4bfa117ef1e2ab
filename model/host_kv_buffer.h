// A small owning paged-KV store in host memory: per layer one zeroed array in the
// cache/kv_layout.h layout (and its scales for int8/fp8). The CPU backend's real pool is
// the cache manager's; this one serves `kvserve generate`, tests and benchmarks, which
// run a few sequences without a scheduler.
//
//   data_[layer]:   [num_blocks][2][num_kv_heads][block_size][head_dim]   (dtype elements)
//   scales_[layer]: [num_blocks][2][num_kv_heads][block_size]             (float)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/kv_layout.h"
#include "model/forward_batch.h"

namespace kvserve::model {

class HostKvBuffer {
 public:
  HostKvBuffer(const cache::KvLayout& layout, int64_t num_blocks);
  HostKvBuffer(const HostKvBuffer&) = delete;
  HostKvBuffer& operator=(const HostKvBuffer&) = delete;

  const cache::KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return num_blocks_; }
  KvCacheView view();
  size_t bytes() const;

 private:
  cache::KvLayout layout_;
  int64_t num_blocks_;
  std::vector<std::vector<float>> storage_;  // float elements keep fp32 rows aligned
  std::vector<std::vector<float>> scales_;
  std::vector<std::byte*> data_ptrs_;
  std::vector<float*> scale_ptrs_;
};

}  // namespace kvserve::model
