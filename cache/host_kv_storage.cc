#include "cache/host_kv_storage.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::cache {
namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

HostKvStorage::HostKvStorage(const KvLayout& layout, int32_t num_blocks, HostMemoryAllocator* allocator)
    : layout_(layout), num_blocks_(num_blocks), allocator_(allocator != nullptr ? allocator : &plain_) {}

HostKvStorage::~HostKvStorage() {
  if (raw_ != nullptr) allocator_->Free(raw_, total_bytes_);
}

absl::StatusOr<std::unique_ptr<HostKvStorage>> HostKvStorage::Create(const KvLayout& layout, int32_t num_blocks,
                                                                     HostMemoryAllocator* allocator) {
  if (layout.num_layers <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 ||
      layout.block_size <= 0 || num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host kv storage: bad layout (layers=", layout.num_layers, " kv_heads=",
        layout.num_kv_heads, " head_dim=", layout.head_dim, " block_size=", layout.block_size,
        ") or num_blocks=", num_blocks));
  }
  std::unique_ptr<HostKvStorage> s(new HostKvStorage(layout, num_blocks, allocator));
  const size_t data_bytes = RoundUp(num_blocks * layout.block_data_bytes());
  const size_t scale_bytes = RoundUp(num_blocks * layout.block_scales() * sizeof(float));
  const size_t layers = static_cast<size_t>(layout.slots());
  const size_t total = layers * (data_bytes + scale_bytes);
  absl::StatusOr<void*> raw = s->allocator_->Allocate(total);
  if (!raw.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("host kv storage: cannot allocate ", total, " bytes of ",
                                                     std::string(s->allocator_->name()), " memory: ", raw.status().message()));
  }
  s->raw_ = *raw;
  s->total_bytes_ = total;
  KVS_CHECK(reinterpret_cast<uintptr_t>(s->raw_) % kAlign == 0, "allocator ", std::string(s->allocator_->name()),
            " returned memory that is not 64-byte aligned");
  auto* base = static_cast<std::byte*>(s->raw_);
  for (size_t l = 0; l < layers; ++l) s->data_.push_back(base + l * data_bytes);
  std::byte* scales_base = base + layers * data_bytes;
  for (size_t l = 0; l < layers; ++l) {
    s->scales_.push_back(layout.has_scales()
                             ? reinterpret_cast<float*>(scales_base + l * scale_bytes)
                             : nullptr);
  }
  return s;
}

absl::Status HostKvStorage::copy_blocks(std::span<const BlockCopy> copies) {
  KVS_RETURN_IF_ERROR(CheckBlockCopies(*this, *this, copies));
  CopyHostBlocks(*this, *this, copies);
  return absl::OkStatus();
}

absl::Status HostKvStorage::copy_blocks_to(KvStorage& dst, std::span<const BlockCopy> copies) {
  // The device side owns the queue of any copy that touches device memory (kv_storage.h).
  if (dst.memory_space() != MemorySpace::kHost) return dst.copy_blocks_from(*this, copies);
  KVS_RETURN_IF_ERROR(CheckBlockCopies(*this, dst, copies));
  CopyHostBlocks(*this, dst, copies);
  return absl::OkStatus();
}

absl::Status HostKvStorage::copy_blocks_from(KvStorage& src, std::span<const BlockCopy> copies) {
  if (src.memory_space() != MemorySpace::kHost) return src.copy_blocks_to(*this, copies);
  KVS_RETURN_IF_ERROR(CheckBlockCopies(src, *this, copies));
  CopyHostBlocks(src, *this, copies);
  return absl::OkStatus();
}

void HostKvStorage::CopyHostBlocks(const KvStorage& src, KvStorage& dst, std::span<const BlockCopy> copies) {
  const KvLayout& layout = src.layout();
  const size_t block_bytes = layout.block_data_bytes();
  const size_t scale_count = layout.block_scales();
  const bool same = &src == &dst;
  for (int l = 0; l < layout.slots(); ++l) {
    const std::byte* src_data = src.layer_data(l);
    std::byte* dst_data = dst.layer_data(l);
    for (const BlockCopy& c : copies) {
      if (same && c.src == c.dst) continue;
      std::memcpy(dst_data + c.dst.value() * block_bytes, src_data + c.src.value() * block_bytes, block_bytes);
    }
    if (scale_count == 0) continue;
    const float* src_scales = src.layer_scales(l);
    float* dst_scales = dst.layer_scales(l);
    for (const BlockCopy& c : copies) {
      if (same && c.src == c.dst) continue;
      std::memcpy(dst_scales + c.dst.value() * scale_count, src_scales + c.src.value() * scale_count,
                  scale_count * sizeof(float));
    }
  }
}

absl::Status HostKvStorage::zero_blocks(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b.value() < 0 || b.value() >= num_blocks_) {
      return absl::InvalidArgumentError(absl::StrCat("zero of block ", b.value(), " out of range"));
    }
  }
  const size_t block_bytes = layout_.block_data_bytes();
  const size_t scale_count = layout_.block_scales();
  for (int l = 0; l < layout_.slots(); ++l) {
    for (BlockId b : blocks) {
      std::memset(data_[l] + b.value() * block_bytes, 0, block_bytes);
      if (scale_count) std::memset(scales_[l] + b.value() * scale_count, 0, scale_count * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void WriteKvToken(KvStorage& storage, int layer, int64_t slot, const float* k, const float* v) {
  const KvLayout& l = storage.layout();
  KVS_CHECK(storage.layer_data(layer) != nullptr, "WriteKvToken needs host-addressable storage");
  const int64_t block = slot / l.block_size;
  const int offset = static_cast<int>(slot % l.block_size);
  KVS_DCHECK(block >= 0 && block < storage.num_blocks(), "slot ", slot, " out of range");
  for (int h = 0; h < l.num_kv_heads; ++h) {
    kernels::cpu::WriteKvRow(l, storage.layer_data(layer), storage.layer_scales(layer), block, 0,
                             h, offset, k + static_cast<size_t>(h) * l.head_dim);
    kernels::cpu::WriteKvRow(l, storage.layer_data(layer), storage.layer_scales(layer), block, 1,
                             h, offset, v + static_cast<size_t>(h) * l.head_dim);
  }
}

void ReadKvToken(const KvStorage& storage, int layer, int64_t slot, float* k, float* v) {
  const KvLayout& l = storage.layout();
  KVS_CHECK(storage.layer_data(layer) != nullptr, "ReadKvToken needs host-addressable storage");
  const int64_t block = slot / l.block_size;
  const int offset = static_cast<int>(slot % l.block_size);
  KVS_DCHECK(block >= 0 && block < storage.num_blocks(), "slot ", slot, " out of range");
  for (int h = 0; h < l.num_kv_heads; ++h) {
    kernels::cpu::ReadKvRow(l, storage.layer_data(layer), storage.layer_scales(layer), block, 0, h,
                            offset, k + static_cast<size_t>(h) * l.head_dim);
    kernels::cpu::ReadKvRow(l, storage.layer_data(layer), storage.layer_scales(layer), block, 1, h,
                            offset, v + static_cast<size_t>(h) * l.head_dim);
  }
}

namespace {

// f(offset into the flat block, pointer into the storage, bytes) for every run of a block.
template <typename Storage, typename F>
void ForEachBlockRun(Storage& storage, BlockId block, F&& f) {
  const KvLayout& l = storage.layout();
  KVS_CHECK(storage.host_addressable(), "block bytes of a storage that is not host-addressable");
  KVS_CHECK(block.value() >= 0 && block.value() < storage.num_blocks(), "block ", block.value(), " out of range");
  const size_t data_bytes = l.block_data_bytes();
  const size_t scale_bytes = l.block_scales() * sizeof(float);
  size_t off = 0;
  for (int layer = 0; layer < l.slots(); ++layer) {
    f(off, storage.layer_data(layer) + static_cast<size_t>(block.value()) * data_bytes, data_bytes);
    off += data_bytes;
  }
  if (scale_bytes == 0) return;
  for (int layer = 0; layer < l.slots(); ++layer) {
    auto* base = reinterpret_cast<decltype(storage.layer_data(0))>(storage.layer_scales(layer));
    f(off, base + static_cast<size_t>(block.value()) * scale_bytes, scale_bytes);
    off += scale_bytes;
  }
}

}  // namespace

void ReadBlockBytes(const KvStorage& storage, BlockId block, std::span<std::byte> out) {
  KVS_CHECK(out.size() == storage.layout().bytes_per_block(), "block bytes: ", out.size(), " != ",
            storage.layout().bytes_per_block());
  ForEachBlockRun(storage, block, [&](size_t off, const std::byte* p, size_t n) { std::memcpy(out.data() + off, p, n); });
}

void WriteBlockBytes(KvStorage& storage, BlockId block, std::span<const std::byte> in) {
  KVS_CHECK(in.size() == storage.layout().bytes_per_block(), "block bytes: ", in.size(), " != ",
            storage.layout().bytes_per_block());
  ForEachBlockRun(storage, block, [&](size_t off, std::byte* p, size_t n) { std::memcpy(p, in.data() + off, n); });
}

}  // namespace kvserve::cache
