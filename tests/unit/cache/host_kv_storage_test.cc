#include "cache/host_kv_storage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

using config::KvDtype;

std::vector<float> Row(int n, float base) {
  std::vector<float> r(n);
  for (int i = 0; i < n; ++i) r[i] = base + 0.25f * i;
  return r;
}

TEST(HostKvStorage, LayoutSizesAndAlignment) {
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3,
                    KvDtype::kInt8}) {
    const KvLayout l = testing::SmallLayout(d, 8, 3, 2, 16);
    auto s = HostKvStorage::Create(l, 5);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->num_blocks(), 5);
    EXPECT_GE((*s)->total_bytes(), 5 * l.bytes_per_block());
    for (int layer = 0; layer < 3; ++layer) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*s)->layer_data(layer)) % 64, 0u);
      EXPECT_EQ((*s)->layer_scales(layer) != nullptr, l.has_scales());
    }
    EXPECT_TRUE((*s)->host_addressable());
  }
  EXPECT_FALSE(HostKvStorage::Create(testing::SmallLayout(KvDtype::kFp32, 4, 0), 4).ok());
  EXPECT_FALSE(HostKvStorage::Create(testing::SmallLayout(), 0).ok());
}

TEST(HostKvStorage, TokensRoundTripAndBlockCopiesMoveDataAndScales) {
  // Tolerances: half a step at the top of the row's range (max |x| = 4.75).
  const std::pair<KvDtype, float> cases[] = {
      {KvDtype::kFp32, 0.0f}, {KvDtype::kInt8, 4.75f / 254}, {KvDtype::kFp8E4M3, 4.75f / 16}};
  for (const auto& [d, tol] : cases) {
    const KvLayout l = testing::SmallLayout(d, 4, 2, 2, 8);
    auto s = std::move(HostKvStorage::Create(l, 4)).value();
    const std::vector<float> k = Row(16, -2.0f), v = Row(16, 1.0f);
    // Token in block 1, offset 3 (slot 7), layer 1.
    WriteKvToken(*s, 1, 7, k.data(), v.data());
    std::vector<float> k2(16), v2(16);
    ReadKvToken(*s, 1, 7, k2.data(), v2.data());
    for (int i = 0; i < 16; ++i) {
      EXPECT_NEAR(k2[i], k[i], tol);
      EXPECT_NEAR(v2[i], v[i], tol);
    }
    // Layer 0 of the same slot is untouched.
    std::vector<float> z(16);
    ReadKvToken(*s, 0, 7, z.data(), z.data());
    for (float x : z) EXPECT_EQ(x, 0.0f);

    const BlockCopy c{BlockId{1}, BlockId{3}};
    ASSERT_TRUE(s->copy_blocks(std::span(&c, 1)).ok());
    std::vector<float> k3(16), v3(16);
    ReadKvToken(*s, 1, 3 * 4 + 3, k3.data(), v3.data());
    EXPECT_EQ(k3, k2);  // bit-identical, scales included
    EXPECT_EQ(v3, v2);

    // Across storages (swap).
    auto other = std::move(HostKvStorage::Create(l, 2)).value();
    const BlockCopy out{BlockId{3}, BlockId{0}};
    ASSERT_TRUE(s->copy_blocks_to(*other, std::span(&out, 1)).ok());
    ReadKvToken(*other, 1, 3, k3.data(), v3.data());
    EXPECT_EQ(k3, k2);

    const BlockId zero[] = {BlockId{3}};
    ASSERT_TRUE(s->zero_blocks(zero).ok());
    ReadKvToken(*s, 1, 15, k3.data(), v3.data());
    for (float x : k3) EXPECT_EQ(x, 0.0f);
  }
}

TEST(HostKvStorage, RejectsBadCopies) {
  auto s = std::move(HostKvStorage::Create(testing::SmallLayout(), 4)).value();
  const BlockCopy bad{BlockId{1}, BlockId{4}};
  EXPECT_EQ(s->copy_blocks(std::span(&bad, 1)).code(), absl::StatusCode::kInvalidArgument);
  auto fp16 = std::move(HostKvStorage::Create(testing::SmallLayout(KvDtype::kFp16), 4)).value();
  const BlockCopy ok{BlockId{1}, BlockId{2}};
  EXPECT_EQ(s->copy_blocks_to(*fp16, std::span(&ok, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  const BlockId zero[] = {BlockId{9}};
  EXPECT_FALSE(s->zero_blocks(zero).ok());
}

}  // namespace
}  // namespace kvserve::cache
