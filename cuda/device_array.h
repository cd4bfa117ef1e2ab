// Device memory as owned, typed arrays for the gpu tests and the CUDA benchmarks (one copy of
// what each used to restate: allocate, upload a host vector, read back, free), and the device
// form of a step's paged sequences built from host arrays. Plain C++ header: no CUDA types.
// Failures are reported, never thrown: ok() is false and the memory is null.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/paged_attention.h"

namespace kvserve::cuda {

// Raw helpers (cudaMalloc / cudaFree / cudaMemcpy); false or null on failure. CopyToHost waits
// for the whole device first (test and benchmark code: any stream may have written `src`).
void* DeviceAlloc(size_t bytes, bool zero);
void DeviceFree(void* p);
bool CopyToDevice(void* dst, const void* src, size_t bytes);
bool CopyToHost(void* dst, const void* src, size_t bytes);

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  // n zeroed elements (at least one is allocated, so get() is never null when ok()).
  explicit DeviceArray(size_t n) : n_(n), p_(static_cast<T*>(DeviceAlloc(Bytes(n), true))) {}
  // A copy of `host`.
  explicit DeviceArray(std::span<const T> host) : DeviceArray(host.size()) {
    if (p_ != nullptr && !host.empty() && !CopyToDevice(p_, host.data(), host.size() * sizeof(T))) Reset();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(std::span<const T>(host)) {}
  ~DeviceArray() { DeviceFree(p_); }
  DeviceArray(DeviceArray&& o) noexcept : n_(std::exchange(o.n_, 0)), p_(std::exchange(o.p_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      DeviceFree(p_);
      n_ = std::exchange(o.n_, 0);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  bool ok() const { return p_ != nullptr; }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // The first n elements (all by default); empty on failure.
  std::vector<T> ToHost(size_t n = static_cast<size_t>(-1)) const {
    n = n < n_ ? n : n_;
    std::vector<T> out(n);
    if (n > 0 && !CopyToHost(out.data(), p_, n * sizeof(T))) out.clear();
    return out;
  }

 private:
  static size_t Bytes(size_t n) { return (n > 0 ? n : 1) * sizeof(T); }
  void Reset() {
    DeviceFree(p_);
    p_ = nullptr;
  }
  size_t n_ = 0;
  T* p_ = nullptr;
};

// A step's sequences on the device (kernels::cuda::DevicePagedSeqs), uploaded from the host
// arrays of kernels::cpu::PagedSeqs plus each row's sequence; the arrays live as long as this.
class UploadedPagedSeqs {
 public:
  UploadedPagedSeqs(std::span<const int32_t> seq_starts, std::span<const int32_t> kv_lens,
                    std::span<const int32_t> block_table_offsets, std::span<const int32_t> block_tables);
  bool ok() const { return starts_.ok() && lens_.ok() && offsets_.ok() && tables_.ok() && row_seq_.ok(); }
  const kernels::cuda::DevicePagedSeqs& view() const { return view_; }

 private:
  DeviceArray<int32_t> starts_, lens_, offsets_, tables_, row_seq_;
  kernels::cuda::DevicePagedSeqs view_;
};

}  // namespace kvserve::cuda
