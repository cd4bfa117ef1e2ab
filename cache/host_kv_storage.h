// KvStorage in host memory: the CPU backend's KV pool and the host swap tier (on CUDA, in
// pinned memory from an injected allocator).
//
//   one allocation from the HostMemoryAllocator, 64-byte aligned, zero-filled:
//   [data layer 0][data layer 1]...[data layer L-1][scales layer 0]...[scales layer L-1]
//
// Each region is padded to 64 bytes so every layer base is cache-line (and AVX-512) aligned.
// Copies are memcpy per layer: one block's K and V of one layer are contiguous (kv_layout.h).
// Copies to or from a device storage are forwarded to it (kv_storage.h); everything a host
// storage executes itself has finished when the call returns, so synchronize() is a no-op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/kv_storage.h"

namespace kvserve::cache {

class HostKvStorage final : public KvStorage {
 public:
  // ResourceExhausted when the memory cannot be allocated; InvalidArgument on a bad layout.
  // `allocator` null: PlainHostAllocator. A given allocator must outlive the storage.
  static absl::StatusOr<std::unique_ptr<HostKvStorage>> Create(const KvLayout& layout, int32_t num_blocks,
                                                               HostMemoryAllocator* allocator = nullptr);
  ~HostKvStorage() override;
  HostKvStorage(const HostKvStorage&) = delete;
  HostKvStorage& operator=(const HostKvStorage&) = delete;

  const KvLayout& layout() const override { return layout_; }
  int32_t num_blocks() const override { return num_blocks_; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  absl::Status copy_blocks(std::span<const BlockCopy> copies) override;
  absl::Status copy_blocks_to(KvStorage& dst, std::span<const BlockCopy> copies) override;
  absl::Status copy_blocks_from(KvStorage& src, std::span<const BlockCopy> copies) override;
  absl::Status zero_blocks(std::span<const BlockId> blocks) override;
  absl::Status synchronize() override { return absl::OkStatus(); }

  std::byte* layer_data(int layer) override { return data_[layer]; }
  float* layer_scales(int layer) override { return scales_[layer]; }
  const std::byte* layer_data(int layer) const override { return data_[layer]; }
  const float* layer_scales(int layer) const override { return scales_[layer]; }

  size_t total_bytes() const { return total_bytes_; }
  std::string_view allocator_name() const { return allocator_->name(); }

 private:
  HostKvStorage(const KvLayout& layout, int32_t num_blocks, HostMemoryAllocator* allocator);
  // memcpy of whole blocks between two host storages (src may be this).
  static void CopyHostBlocks(const KvStorage& src, KvStorage& dst, std::span<const BlockCopy> copies);

  KvLayout layout_;
  int32_t num_blocks_;
  PlainHostAllocator plain_;          // used when no allocator is injected
  HostMemoryAllocator* allocator_;    // plain_ or the injected one
  void* raw_ = nullptr;               // from allocator_, owns everything below
  size_t total_bytes_ = 0;
  std::vector<std::byte*> data_;
  std::vector<float*> scales_;  // null entries for unscaled dtypes
};

// One whole block of a host-addressable storage as a flat byte string, in the remote tier's
// record layout (kv_block_record.h): every layer's data run, then every layer's scales.
// The span must be exactly layout().bytes_per_block() bytes (checked).
void ReadBlockBytes(const KvStorage& storage, BlockId block, std::span<std::byte> out);
void WriteBlockBytes(KvStorage& storage, BlockId block, std::span<const std::byte> in);

// Token-level access for CPU code and tests. `k` and `v` are [num_kv_heads][head_dim]
// floats; quantized on write (kernels/cpu/kv_quant.h), dequantized on read. The storage must
// be host-addressable; `slot` = block * block_size + offset.
void WriteKvToken(KvStorage& storage, int layer, int64_t slot, const float* k, const float* v);
void ReadKvToken(const KvStorage& storage, int layer, int64_t slot, float* k, float* v);

}  // namespace kvserve::cache
