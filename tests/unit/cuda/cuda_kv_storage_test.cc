// CudaKvStorage against HostKvStorage: every copy direction the runner uses is bit-exact for
// every KV dtype, in issue order, with pinned and pageable host tiers. Needs a GPU (label gpu).
#include "cuda/cuda_kv_storage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cache/host_kv_storage.h"
#include "kernels/device_probe.h"

namespace kvserve::cuda {
namespace {

using cache::BlockCopy;
using cache::BlockId;
using cache::HostKvStorage;
using cache::KvLayout;
using config::KvDtype;

KvLayout Layout(KvDtype d, int block_size, int head_dim, int kv_heads) {
  KvLayout l;
  l.num_layers = 3;
  l.num_kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.dtype = d;
  return l;
}

// Random bytes in every block of a host storage (codes and scales alike: copies must not care).
void Randomize(HostKvStorage& s, uint32_t seed) {
  std::mt19937 rng(seed);
  const KvLayout& l = s.layout();
  const size_t data = static_cast<size_t>(s.num_blocks()) * l.block_elems() * l.elem_bytes();
  const size_t scales = static_cast<size_t>(s.num_blocks()) * l.block_scales();
  for (int layer = 0; layer < l.num_layers; ++layer) {
    for (size_t i = 0; i < data; ++i) s.layer_data(layer)[i] = static_cast<std::byte>(rng() & 0xff);
    for (size_t i = 0; i < scales; ++i) s.layer_scales(layer)[i] = static_cast<float>(rng() % 1000) * 0.01f;
  }
}

bool SameBlock(const HostKvStorage& a, int32_t ba, const HostKvStorage& b, int32_t bb) {
  const KvLayout& l = a.layout();
  const size_t data = l.block_elems() * l.elem_bytes();
  const size_t scales = l.block_scales() * sizeof(float);
  for (int layer = 0; layer < l.num_layers; ++layer) {
    if (std::memcmp(a.layer_data(layer) + ba * data, b.layer_data(layer) + bb * data, data) != 0) return false;
    if (scales != 0 && std::memcmp(a.layer_scales(layer) + ba * l.block_scales(),
                                   b.layer_scales(layer) + bb * l.block_scales(), scales) != 0) {
      return false;
    }
  }
  return true;
}

class CudaKvStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  }
};

TEST_F(CudaKvStorageTest, UploadCopyOnWriteSwapAndDownloadAreBitExact) {
  PinnedHostAllocator pinned;
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    for (int block_size : {16, 32}) {
      for (int head_dim : {64, 128}) {
        SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(d) << " block " << block_size << " hd " << head_dim);
        const KvLayout l = Layout(d, block_size, head_dim, 2);
        auto src = std::move(HostKvStorage::Create(l, 9)).value();
        Randomize(*src, 17u + static_cast<uint32_t>(block_size + head_dim));
        auto dev = std::move(CudaKvStorage::Create(l, 12)).value();
        EXPECT_EQ(dev->memory_space(), cache::MemorySpace::kDevice);
        auto tier = std::move(HostKvStorage::Create(l, 6, &pinned)).value();
        auto back = std::move(HostKvStorage::Create(l, 12)).value();

        // Upload scattered blocks, copy-on-write inside the device, swap out to the pinned tier
        // and back into other blocks, then download everything.
        const BlockCopy up[] = {{BlockId{1}, BlockId{7}}, {BlockId{4}, BlockId{2}}, {BlockId{8}, BlockId{11}}};
        ASSERT_TRUE(dev->copy_blocks_from(*src, up).ok());
        const BlockCopy cow[] = {{BlockId{7}, BlockId{3}}};
        ASSERT_TRUE(dev->copy_blocks(cow).ok());
        const BlockCopy out[] = {{BlockId{2}, BlockId{0}}, {BlockId{11}, BlockId{5}}};
        ASSERT_TRUE(dev->copy_blocks_to(*tier, out).ok());
        const BlockCopy in[] = {{BlockId{0}, BlockId{9}}, {BlockId{5}, BlockId{10}}};
        ASSERT_TRUE(dev->copy_blocks_from(*tier, in).ok());
        ASSERT_TRUE(dev->zero_blocks(std::vector<BlockId>{BlockId{11}}).ok());
        std::vector<BlockCopy> all;
        for (int32_t b = 0; b < 12; ++b) all.push_back({BlockId{b}, BlockId{b}});
        ASSERT_TRUE(back->copy_blocks_from(*dev, all).ok());  // forwarded to the device queue
        ASSERT_TRUE(dev->synchronize().ok());

        EXPECT_TRUE(SameBlock(*back, 7, *src, 1));
        EXPECT_TRUE(SameBlock(*back, 3, *src, 1));
        EXPECT_TRUE(SameBlock(*back, 2, *src, 4));
        EXPECT_TRUE(SameBlock(*back, 9, *src, 4));
        EXPECT_TRUE(SameBlock(*back, 10, *src, 8));
        EXPECT_TRUE(SameBlock(*tier, 5, *src, 8));
        auto zeros = std::move(HostKvStorage::Create(l, 1)).value();
        EXPECT_TRUE(SameBlock(*back, 11, *zeros, 0));  // zeroed after the swap-out
        EXPECT_TRUE(SameBlock(*back, 0, *zeros, 0));   // fresh device memory is zero
      }
    }
  }
}

TEST_F(CudaKvStorageTest, BadCopiesAreRejected) {
  const KvLayout l = Layout(KvDtype::kBf16, 16, 64, 2);
  auto dev = std::move(CudaKvStorage::Create(l, 4)).value();
  auto host = std::move(HostKvStorage::Create(l, 2)).value();
  const BlockCopy bad[] = {{BlockId{3}, BlockId{2}}};
  EXPECT_EQ(dev->copy_blocks_to(*host, bad).code(), absl::StatusCode::kInvalidArgument);
  auto other = std::move(HostKvStorage::Create(Layout(KvDtype::kFp16, 16, 64, 2), 4)).value();
  const BlockCopy ok[] = {{BlockId{0}, BlockId{1}}};
  EXPECT_EQ(dev->copy_blocks_from(*other, ok).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(dev->synchronize().ok());
}

}  // namespace
}  // namespace kvserve::cuda
