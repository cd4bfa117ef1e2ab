// KvStorage in CUDA device memory: the CUDA backend's KV pool. Plain C++ header (no CUDA
// types), so the engine may include it; cache/ and scheduler/ never do.
//
//   one cudaMalloc per storage, same layout as HostKvStorage (cache/kv_layout.h):
//   [data layer 0]...[data layer L-1][scales layer 0]...[scales layer L-1], 256-byte aligned
//
// Every copy and zeroing is issued asynchronously on the storage's own stream, in call order
// (kv_storage.h). Copies to and from host storages use cudaMemcpyAsync with unified addressing,
// so pinned host memory (PinnedHostAllocator) is copied by the DMA engines without staging,
// overlapping the forward pass of another stream; pageable memory works but is staged.
// synchronize() waits for the stream. The destructor synchronizes before freeing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/kv_storage.h"

namespace kvserve::cuda {

class CudaKvStorage final : public cache::KvStorage {
 public:
  // On `device`. ResourceExhausted when the device memory cannot be allocated, FailedPrecondition
  // when no device is usable, InvalidArgument on a bad layout.
  static absl::StatusOr<std::unique_ptr<CudaKvStorage>> Create(const cache::KvLayout& layout, int32_t num_blocks,
                                                               int device = 0);
  ~CudaKvStorage() override;
  CudaKvStorage(const CudaKvStorage&) = delete;
  CudaKvStorage& operator=(const CudaKvStorage&) = delete;

  const cache::KvLayout& layout() const override { return layout_; }
  int32_t num_blocks() const override { return num_blocks_; }
  cache::MemorySpace memory_space() const override { return cache::MemorySpace::kDevice; }
  absl::Status copy_blocks(std::span<const cache::BlockCopy> copies) override;
  absl::Status copy_blocks_to(cache::KvStorage& dst, std::span<const cache::BlockCopy> copies) override;
  absl::Status copy_blocks_from(cache::KvStorage& src, std::span<const cache::BlockCopy> copies) override;
  absl::Status zero_blocks(std::span<const cache::BlockId> blocks) override;
  absl::Status synchronize() override;

  std::byte* layer_data(int) override { return nullptr; }
  float* layer_scales(int) override { return nullptr; }
  const std::byte* layer_data(int) const override { return nullptr; }
  const float* layer_scales(int) const override { return nullptr; }

  // Device pointers for the CUDA kernels (never dereferenced on the host).
  std::byte* device_layer_data(int layer) const { return data_[static_cast<size_t>(layer)]; }
  float* device_layer_scales(int layer) const { return scales_[static_cast<size_t>(layer)]; }
  // The stream every operation of this storage is ordered on (a cudaStream_t).
  void* stream() const { return stream_; }
  int device() const { return device_; }
  size_t total_bytes() const { return total_bytes_; }

 private:
  CudaKvStorage(const cache::KvLayout& layout, int32_t num_blocks, int device);
  // Issues whole-block copies from `src` layer arrays to `dst` layer arrays (any spaces).
  absl::Status Copy(const cache::KvStorage& src_storage, std::span<std::byte* const> src_data,
                    std::span<float* const> src_scales, std::span<std::byte* const> dst_data,
                    std::span<float* const> dst_scales, std::span<const cache::BlockCopy> copies);

  cache::KvLayout layout_;
  int32_t num_blocks_;
  int device_;
  void* raw_ = nullptr;     // device allocation
  void* stream_ = nullptr;  // cudaStream_t
  size_t total_bytes_ = 0;
  std::vector<std::byte*> data_;
  std::vector<float*> scales_;
};

// Page-locked host memory for the swap tier (and any host buffer the device copies from).
class PinnedHostAllocator final : public cache::HostMemoryAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p, size_t bytes) override;
  std::string_view name() const override { return "pinned-host"; }
};

}  // namespace kvserve::cuda
