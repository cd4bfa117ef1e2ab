// The backend-neutral storage seam (cache/kv_storage.h): memory spaces, copies in both
// directions between host and (simulated) device memory written the same way, ordering on
// the device's queue, and the injectable host allocator.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/host_kv_storage.h"
#include "cache/kv_storage.h"
#include "tests/unit/cache/cache_test_util.h"
#include "tests/unit/cache/simulated_device_storage.h"

namespace kvserve::cache {
namespace {

using config::KvDtype;
using testing::SimulatedDeviceKvStorage;
using testing::SmallLayout;

std::vector<float> Pattern(int n, float base) {
  std::vector<float> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = base + 0.125f * static_cast<float>(i % 29) - 1.5f;
  return r;
}

// Fills every slot of `block` (all layers) with a pattern that depends on `tag`.
void FillBlock(KvStorage& s, int32_t block, float tag) {
  const KvLayout& l = s.layout();
  const int row = l.num_kv_heads * l.head_dim;
  for (int layer = 0; layer < l.num_layers; ++layer) {
    for (int off = 0; off < l.block_size; ++off) {
      const float base = tag + 0.01f * static_cast<float>(layer * 31 + off);
      const std::vector<float> k = Pattern(row, base), v = Pattern(row, -base);
      WriteKvToken(s, layer, static_cast<int64_t>(block) * l.block_size + off, k.data(), v.data());
    }
  }
}

// Raw bytes (data and scales, every layer) of one block.
std::vector<std::byte> BlockBytes(const KvStorage& s, int32_t block) {
  const KvLayout& l = s.layout();
  const size_t data = l.block_elems() * l.elem_bytes();
  const size_t scales = l.block_scales() * sizeof(float);
  std::vector<std::byte> out;
  for (int layer = 0; layer < l.num_layers; ++layer) {
    const std::byte* d = s.layer_data(layer) + static_cast<size_t>(block) * data;
    out.insert(out.end(), d, d + data);
    if (scales == 0) continue;
    const auto* sc = reinterpret_cast<const std::byte*>(s.layer_scales(layer) + static_cast<size_t>(block) * l.block_scales());
    out.insert(out.end(), sc, sc + scales);
  }
  return out;
}

TEST(KvStorageSeam, MemorySpaceIsExplicit) {
  auto host = std::move(HostKvStorage::Create(SmallLayout(), 3)).value();
  EXPECT_EQ(host->memory_space(), MemorySpace::kHost);
  EXPECT_TRUE(host->host_addressable());
  SimulatedDeviceKvStorage dev(SmallLayout(), 3);
  EXPECT_EQ(dev.memory_space(), MemorySpace::kDevice);
  EXPECT_FALSE(dev.host_addressable());
  EXPECT_EQ(MemorySpaceName(MemorySpace::kHost), "host");
  EXPECT_EQ(MemorySpaceName(MemorySpace::kDevice), "device");
}

// Swap-out and swap-in are the same two calls whatever the spaces, and a round trip through
// the other tier is bit-exact for every dtype (scales included).
TEST(KvStorageSeam, SwapRoundTripIsBitExactBetweenHostAndDevice) {
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    SCOPED_TRACE(static_cast<int>(d));
    const KvLayout l = SmallLayout(d, 4, 2, 2, 8);
    SimulatedDeviceKvStorage dev(l, 6);
    auto tier = std::move(HostKvStorage::Create(l, 4)).value();
    FillBlock(dev.UploadTarget(), 2, 1.0f);
    FillBlock(dev.UploadTarget(), 5, 7.0f);
    const std::vector<std::byte> b2 = BlockBytes(dev.Download(), 2), b5 = BlockBytes(dev.Download(), 5);

    const BlockCopy out[] = {{BlockId{2}, BlockId{0}}, {BlockId{5}, BlockId{3}}};
    ASSERT_TRUE(dev.copy_blocks_to(*tier, out).ok());
    EXPECT_EQ(dev.queued(), 1u);  // issued on the device's queue, not run yet
    ASSERT_TRUE(dev.synchronize().ok());
    EXPECT_EQ(BlockBytes(*tier, 0), b2);
    EXPECT_EQ(BlockBytes(*tier, 3), b5);

    ASSERT_TRUE(dev.zero_blocks(std::vector<BlockId>{BlockId{2}, BlockId{5}}).ok());
    const BlockCopy in[] = {{BlockId{0}, BlockId{1}}, {BlockId{3}, BlockId{4}}};
    ASSERT_TRUE(dev.copy_blocks_from(*tier, in).ok());
    ASSERT_TRUE(dev.synchronize().ok());
    EXPECT_EQ(BlockBytes(dev.Download(), 1), b2);
    EXPECT_EQ(BlockBytes(dev.Download(), 4), b5);
    EXPECT_NE(BlockBytes(dev.Download(), 2), b2);  // zeroed before the swap-in
  }
}

// A host storage asked to copy to or from device memory hands the copy to the device side,
// which owns the queue.
TEST(KvStorageSeam, HostStorageForwardsDeviceCopiesToTheDeviceQueue) {
  const KvLayout l = SmallLayout(KvDtype::kInt8);
  SimulatedDeviceKvStorage dev(l, 4);
  auto host = std::move(HostKvStorage::Create(l, 4)).value();
  FillBlock(*host, 1, 3.0f);
  const std::vector<std::byte> b1 = BlockBytes(*host, 1);

  const BlockCopy up[] = {{BlockId{1}, BlockId{2}}};
  ASSERT_TRUE(host->copy_blocks_to(dev, up).ok());
  EXPECT_EQ(dev.host_to_device_calls(), 1);
  EXPECT_EQ(dev.queued(), 1u);
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(BlockBytes(dev.Download(), 2), b1);

  const BlockCopy down[] = {{BlockId{2}, BlockId{3}}};
  ASSERT_TRUE(host->copy_blocks_from(dev, down).ok());
  EXPECT_EQ(dev.device_to_host_calls(), 1);
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(BlockBytes(*host, 3), b1);
}

// The manager may reuse a host block in the very next list: swap-out of A into host block 0,
// then (same step) swap-in of host block 0 into B must read A's bytes only if issued in that
// order; the queue keeps issue order.
TEST(KvStorageSeam, CopiesRunInIssueOrder) {
  const KvLayout l = SmallLayout(KvDtype::kFp16);
  SimulatedDeviceKvStorage dev(l, 4);
  auto tier = std::move(HostKvStorage::Create(l, 1)).value();
  FillBlock(dev.UploadTarget(), 1, 2.0f);
  FillBlock(dev.UploadTarget(), 2, 9.0f);
  const std::vector<std::byte> a = BlockBytes(dev.Download(), 1), b = BlockBytes(dev.Download(), 2);

  const BlockCopy out1[] = {{BlockId{1}, BlockId{0}}};
  const BlockCopy in1[] = {{BlockId{0}, BlockId{3}}};
  const BlockCopy out2[] = {{BlockId{2}, BlockId{0}}};
  ASSERT_TRUE(dev.copy_blocks_to(*tier, out1).ok());
  ASSERT_TRUE(dev.copy_blocks_from(*tier, in1).ok());
  ASSERT_TRUE(dev.copy_blocks_to(*tier, out2).ok());
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(BlockBytes(dev.Download(), 3), a);  // read before out2 overwrote host block 0
  EXPECT_EQ(BlockBytes(*tier, 0), b);
}

TEST(KvStorageSeam, BadCopiesAreRejectedBeforeAnythingIsQueued) {
  SimulatedDeviceKvStorage dev(SmallLayout(), 3);
  auto host = std::move(HostKvStorage::Create(SmallLayout(), 2)).value();
  auto fp16 = std::move(HostKvStorage::Create(SmallLayout(KvDtype::kFp16), 2)).value();
  const BlockCopy out_of_range[] = {{BlockId{0}, BlockId{2}}};
  absl::Status st = dev.copy_blocks_to(*host, out_of_range);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out of range"), std::string_view::npos) << st;
  const BlockCopy ok[] = {{BlockId{0}, BlockId{1}}};
  const BlockCopy bad_src[] = {{BlockId{2}, BlockId{0}}};  // the host storage has 2 blocks
  st = host->copy_blocks_to(dev, bad_src);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = dev.copy_blocks_from(*fp16, ok);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layouts"), std::string_view::npos) << st;
  EXPECT_EQ(dev.queued(), 0u);
}

// The allocator is injectable (pinned memory on CUDA); the storage uses it for all its memory
// and gives it back with the size it took.
class CountingAllocator final : public HostMemoryAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (fail) return absl::ResourceExhaustedError("counting allocator: told to fail");
    ++allocations;
    allocated = bytes;
    return plain_.Allocate(bytes);
  }
  void Free(void* p, size_t bytes) override {
    ++frees;
    freed = bytes;
    plain_.Free(p, bytes);
  }
  std::string_view name() const override { return "counting"; }

  bool fail = false;
  int allocations = 0, frees = 0;
  size_t allocated = 0, freed = 0;

 private:
  PlainHostAllocator plain_;
};

TEST(KvStorageSeam, InjectedAllocatorBacksTheStorage) {
  CountingAllocator alloc;
  {
    auto s = HostKvStorage::Create(SmallLayout(KvDtype::kInt8), 5, &alloc);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(alloc.allocations, 1);
    EXPECT_EQ(alloc.allocated, (*s)->total_bytes());
    EXPECT_EQ((*s)->allocator_name(), "counting");
    FillBlock(**s, 4, 1.0f);  // the memory is usable
  }
  EXPECT_EQ(alloc.frees, 1);
  EXPECT_EQ(alloc.freed, alloc.allocated);

  alloc.fail = true;
  auto s = HostKvStorage::Create(SmallLayout(), 2, &alloc);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("counting"), std::string_view::npos) << s.status();
}

TEST(KvStorageSeam, PlainAllocatorIsAlignedAndZeroed) {
  PlainHostAllocator a;
  for (size_t bytes : {1u, 63u, 64u, 4097u, 1u << 20}) {
    auto p = a.Allocate(bytes);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u);
    const auto* b = static_cast<const unsigned char*>(*p);
    for (size_t i = 0; i < bytes; i += 61) EXPECT_EQ(b[i], 0) << i;
    a.Free(*p, bytes);
  }
}

}  // namespace
}  // namespace kvserve::cache
