#include "cuda/cuda_kv_storage.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::cuda {
namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's own alignment; keeps every layer base aligned
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::Status CudaError(cudaError_t err, const std::string& what) {
  cudaGetLastError();  // clear the sticky-free error state
  const absl::StatusCode code =
      err == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

#define KVS_CUDA_RETURN_IF_ERROR(call, what)           \
  do {                                                 \
    const cudaError_t kvs_err_ = (call);               \
    if (kvs_err_ != cudaSuccess) return CudaError(kvs_err_, what); \
  } while (0)

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// Layer base pointers of any storage: device pointers of a CudaKvStorage, host pointers of a
// host storage. Another device implementation cannot be addressed from here.
absl::Status LayerPointers(cache::KvStorage& s, std::vector<std::byte*>& data, std::vector<float*>& scales) {
  const int layers = s.layout().num_layers;
  data.resize(static_cast<size_t>(layers));
  scales.resize(static_cast<size_t>(layers));
  if (auto* c = dynamic_cast<CudaKvStorage*>(&s)) {
    for (int l = 0; l < layers; ++l) {
      data[static_cast<size_t>(l)] = c->device_layer_data(l);
      scales[static_cast<size_t>(l)] = c->device_layer_scales(l);
    }
    return absl::OkStatus();
  }
  if (s.memory_space() != cache::MemorySpace::kHost) {
    return absl::UnimplementedError("cuda kv storage: copies with a non-CUDA device storage");
  }
  for (int l = 0; l < layers; ++l) {
    data[static_cast<size_t>(l)] = s.layer_data(l);
    scales[static_cast<size_t>(l)] = s.layer_scales(l);
  }
  return absl::OkStatus();
}

}  // namespace

CudaKvStorage::CudaKvStorage(const cache::KvLayout& layout, int32_t num_blocks, int device)
    : layout_(layout), num_blocks_(num_blocks), device_(device) {}

CudaKvStorage::~CudaKvStorage() {
  if (stream_ != nullptr) {
    cudaSetDevice(device_);
    cudaStreamSynchronize(AsStream(stream_));
    cudaStreamDestroy(AsStream(stream_));
  }
  if (raw_ != nullptr) cudaFree(raw_);
}

absl::StatusOr<std::unique_ptr<CudaKvStorage>> CudaKvStorage::Create(const cache::KvLayout& layout,
                                                                     int32_t num_blocks, int device) {
  if (layout.num_layers <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 || layout.block_size <= 0 ||
      num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda kv storage: bad layout (layers=", layout.num_layers,
                                                   " kv_heads=", layout.num_kv_heads, " head_dim=", layout.head_dim,
                                                   " block_size=", layout.block_size, ") or num_blocks=", num_blocks));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cuda kv storage: no usable CUDA device ", device));
  }
  std::unique_ptr<CudaKvStorage> s(new CudaKvStorage(layout, num_blocks, device));
  KVS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  const size_t data_bytes = RoundUp(static_cast<size_t>(num_blocks) * layout.block_data_bytes());
  const size_t scale_bytes = RoundUp(static_cast<size_t>(num_blocks) * layout.block_scales() * sizeof(float));
  const size_t layers = static_cast<size_t>(layout.num_layers);
  s->total_bytes_ = layers * (data_bytes + scale_bytes);
  cudaStream_t stream = nullptr;
  KVS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  s->stream_ = stream;
  KVS_CUDA_RETURN_IF_ERROR(cudaMalloc(&s->raw_, s->total_bytes_),
                           absl::StrCat("cudaMalloc of ", s->total_bytes_, " bytes of KV"));
  // Fresh KV is zero, like the host pool (the null block must read as zeros).
  KVS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s->raw_, 0, s->total_bytes_, stream), "cudaMemsetAsync");
  auto* base = static_cast<std::byte*>(s->raw_);
  for (size_t l = 0; l < layers; ++l) s->data_.push_back(base + l * data_bytes);
  std::byte* scales_base = base + layers * data_bytes;
  for (size_t l = 0; l < layers; ++l) {
    s->scales_.push_back(layout.has_scales() ? reinterpret_cast<float*>(scales_base + l * scale_bytes) : nullptr);
  }
  KVS_RETURN_IF_ERROR(s->synchronize());
  return s;
}

absl::Status CudaKvStorage::Copy(const cache::KvStorage& src_storage, std::span<std::byte* const> src_data,
                                 std::span<float* const> src_scales, std::span<std::byte* const> dst_data,
                                 std::span<float* const> dst_scales, std::span<const cache::BlockCopy> copies) {
  const size_t block_bytes = layout_.block_data_bytes();
  const size_t scale_bytes = layout_.block_scales() * sizeof(float);
  const bool same = &src_storage == this && src_data.data() == dst_data.data();
  KVS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t stream = AsStream(stream_);
  for (size_t l = 0; l < static_cast<size_t>(layout_.num_layers); ++l) {
    for (const cache::BlockCopy& c : copies) {
      if (same && c.src == c.dst) continue;
      const size_t s = static_cast<size_t>(c.src.value()), d = static_cast<size_t>(c.dst.value());
      KVS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst_data[l] + d * block_bytes, src_data[l] + s * block_bytes,
                                               block_bytes, cudaMemcpyDefault, stream),
                               "kv block copy");
      if (scale_bytes == 0) continue;
      KVS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(reinterpret_cast<std::byte*>(dst_scales[l]) + d * scale_bytes,
                          reinterpret_cast<const std::byte*>(src_scales[l]) + s * scale_bytes, scale_bytes,
                          cudaMemcpyDefault, stream),
          "kv scale copy");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaKvStorage::copy_blocks(std::span<const cache::BlockCopy> copies) {
  KVS_RETURN_IF_ERROR(cache::CheckBlockCopies(*this, *this, copies));
  return Copy(*this, data_, scales_, data_, scales_, copies);
}

absl::Status CudaKvStorage::copy_blocks_to(cache::KvStorage& dst, std::span<const cache::BlockCopy> copies) {
  KVS_RETURN_IF_ERROR(cache::CheckBlockCopies(*this, dst, copies));
  std::vector<std::byte*> data;
  std::vector<float*> scales;
  KVS_RETURN_IF_ERROR(LayerPointers(dst, data, scales));
  return Copy(*this, data_, scales_, data, scales, copies);
}

absl::Status CudaKvStorage::copy_blocks_from(cache::KvStorage& src, std::span<const cache::BlockCopy> copies) {
  KVS_RETURN_IF_ERROR(cache::CheckBlockCopies(src, *this, copies));
  std::vector<std::byte*> data;
  std::vector<float*> scales;
  KVS_RETURN_IF_ERROR(LayerPointers(src, data, scales));
  return Copy(src, data, scales, data_, scales_, copies);
}

absl::Status CudaKvStorage::zero_blocks(std::span<const cache::BlockId> blocks) {
  for (cache::BlockId b : blocks) {
    if (b.value() < 0 || b.value() >= num_blocks_) {
      return absl::InvalidArgumentError(absl::StrCat("zero of block ", b.value(), " out of range"));
    }
  }
  const size_t block_bytes = layout_.block_data_bytes();
  const size_t scale_bytes = layout_.block_scales() * sizeof(float);
  KVS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  for (size_t l = 0; l < data_.size(); ++l) {
    for (cache::BlockId b : blocks) {
      const size_t i = static_cast<size_t>(b.value());
      KVS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data_[l] + i * block_bytes, 0, block_bytes, AsStream(stream_)),
                               "kv block zero");
      if (scale_bytes == 0) continue;
      KVS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(reinterpret_cast<std::byte*>(scales_[l]) + i * scale_bytes, 0,
                                               scale_bytes, AsStream(stream_)),
                               "kv scale zero");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaKvStorage::synchronize() {
  KVS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  KVS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(stream_)), "cudaStreamSynchronize");
  return absl::OkStatus();
}

absl::StatusOr<void*> PinnedHostAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) return CudaError(err, absl::StrCat("cudaHostAlloc of ", bytes, " bytes"));
  std::memset(p, 0, bytes);  // pinned pages are resident anyway; KV starts at zero
  return p;
}

void PinnedHostAllocator::Free(void* p, size_t /*bytes*/) {
  if (p != nullptr) cudaFreeHost(p);
}

}  // namespace kvserve::cuda
