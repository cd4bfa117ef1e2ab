// A KvStorage that behaves like device memory, for testing the storage seam without a GPU:
// memory_space() is kDevice, layer_data() is null, and every copy or zeroing is queued (its
// "stream") and only runs at synchronize(), in issue order, reading its source then, as an
// asynchronous copy engine would. Tests see the contents through Download(), which (like a
// real device-to-host read) requires a synchronized queue.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "base/check.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_storage.h"

namespace kvserve::cache::testing {

class SimulatedDeviceKvStorage final : public KvStorage {
 public:
  SimulatedDeviceKvStorage(const KvLayout& layout, int32_t num_blocks)
      : backing_(std::move(HostKvStorage::Create(layout, num_blocks)).value()) {}

  const KvLayout& layout() const override { return backing_->layout(); }
  int32_t num_blocks() const override { return backing_->num_blocks(); }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }

  absl::Status copy_blocks(std::span<const BlockCopy> copies) override {
    KVS_RETURN_IF_ERROR(CheckBlockCopies(*this, *this, copies));
    Enqueue([this, c = Copy(copies)] { return backing_->copy_blocks(c); });
    return absl::OkStatus();
  }
  absl::Status copy_blocks_to(KvStorage& dst, std::span<const BlockCopy> copies) override {
    KVS_CHECK(dst.memory_space() == MemorySpace::kHost, "simulated device: only device <-> host copies");
    KVS_RETURN_IF_ERROR(CheckBlockCopies(*this, dst, copies));
    Enqueue([this, &dst, c = Copy(copies)] { return backing_->copy_blocks_to(dst, c); });
    ++device_to_host_calls_;
    return absl::OkStatus();
  }
  absl::Status copy_blocks_from(KvStorage& src, std::span<const BlockCopy> copies) override {
    KVS_CHECK(src.memory_space() == MemorySpace::kHost, "simulated device: only device <-> host copies");
    KVS_RETURN_IF_ERROR(CheckBlockCopies(src, *this, copies));
    Enqueue([this, &src, c = Copy(copies)] { return backing_->copy_blocks_from(src, c); });
    ++host_to_device_calls_;
    return absl::OkStatus();
  }
  absl::Status zero_blocks(std::span<const BlockId> blocks) override {
    for (BlockId b : blocks) {
      if (b.value() < 0 || b.value() >= num_blocks()) return absl::InvalidArgumentError("zero out of range");
    }
    Enqueue([this, z = std::vector<BlockId>(blocks.begin(), blocks.end())] { return backing_->zero_blocks(z); });
    return absl::OkStatus();
  }
  absl::Status synchronize() override {
    for (auto& op : queue_) KVS_RETURN_IF_ERROR(op());
    queue_.clear();
    return absl::OkStatus();
  }

  std::byte* layer_data(int) override { return nullptr; }
  float* layer_scales(int) override { return nullptr; }
  const std::byte* layer_data(int) const override { return nullptr; }
  const float* layer_scales(int) const override { return nullptr; }

  // The device contents, readable by the test once the queue is empty.
  const HostKvStorage& Download() const {
    KVS_CHECK(queue_.empty(), "read of simulated device memory with ", queue_.size(), " queued operations");
    return *backing_;
  }
  HostKvStorage& UploadTarget() {  // direct write access for test setup (queue must be empty)
    KVS_CHECK(queue_.empty(), "write of simulated device memory with queued operations");
    return *backing_;
  }
  size_t queued() const { return queue_.size(); }
  int host_to_device_calls() const { return host_to_device_calls_; }
  int device_to_host_calls() const { return device_to_host_calls_; }

 private:
  static std::vector<BlockCopy> Copy(std::span<const BlockCopy> c) { return {c.begin(), c.end()}; }
  void Enqueue(std::function<absl::Status()> op) { queue_.push_back(std::move(op)); }

  std::unique_ptr<HostKvStorage> backing_;
  std::vector<std::function<absl::Status()>> queue_;
  int host_to_device_calls_ = 0;
  int device_to_host_calls_ = 0;
};

}  // namespace kvserve::cache::testing
