#include "model/host_kv_buffer.h"

namespace kvserve::model {

HostKvBuffer::HostKvBuffer(const cache::KvLayout& layout, int64_t num_blocks)
    : layout_(layout), num_blocks_(num_blocks) {
  const size_t bytes = static_cast<size_t>(num_blocks) * layout.block_data_bytes();
  for (int l = 0; l < layout.num_layers; ++l) {
    storage_.emplace_back((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
    data_ptrs_.push_back(reinterpret_cast<std::byte*>(storage_.back().data()));
    if (layout.has_scales()) {
      scales_.emplace_back(static_cast<size_t>(num_blocks) * layout.block_scales(), 0.0f);
      scale_ptrs_.push_back(scales_.back().data());
    }
  }
}

KvCacheView HostKvBuffer::view() {
  KvCacheView v;
  v.layout = layout_;
  v.num_blocks = num_blocks_;
  v.layer_data = data_ptrs_;
  v.layer_scales = scale_ptrs_;
  return v;
}

size_t HostKvBuffer::bytes() const { return static_cast<size_t>(num_blocks_) * layout_.bytes_per_block(); }

}  // namespace kvserve::model
