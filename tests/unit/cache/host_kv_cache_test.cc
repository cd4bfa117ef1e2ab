#include "cache/host_kv_cache.h"

#include <gtest/gtest.h>

#include "cache/cache_sizing.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

KvLayout ModelDims() {
  KvLayout l;
  l.num_layers = 4;
  l.num_kv_heads = 2;
  l.head_dim = 32;
  return l;
}

TEST(HostKvCache, BlocksComeFromTheByteBudget) {
  config::CacheConfig cfg;
  cfg.block_size = 16;
  cfg.kv_dtype = config::KvDtype::kFp16;
  KvLayout l = ModelDims();
  l.block_size = 16;
  l.dtype = config::KvDtype::kFp16;
  const size_t bpb = l.bytes_per_block();  // 4 * 2 * 2 * 16 * 32 * 2 = 16 KiB
  EXPECT_EQ(bpb, 16384u);
  cfg.kv_bytes = 100 * bpb + 5;
  cfg.host_swap_bytes = 10 * bpb;
  auto c = MakeHostKvCache(cfg, ModelDims(), base::Logger());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->manager->usage().total_blocks, 100);
  EXPECT_EQ(c->manager->max_tokens(), 1600);
  EXPECT_EQ(c->storage->num_blocks(), 101);  // + the null block
  EXPECT_EQ(c->storage->layout().dtype, config::KvDtype::kFp16);
  ASSERT_NE(c->swap, nullptr);
  EXPECT_EQ(c->swap->num_blocks(), 10);
  EXPECT_EQ(c->manager->usage().swap_total_blocks, 10);

  // fp8 and int8 halve the data bytes: about twice the blocks for the same budget.
  cfg.kv_dtype = config::KvDtype::kInt8;
  cfg.host_swap_bytes = 0;
  auto q = MakeHostKvCache(cfg, ModelDims(), base::Logger());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->manager->usage().total_blocks, 177);  // 100 * 16384 / (8192 + 1024 scales)
  EXPECT_EQ(q->swap, nullptr);
  EXPECT_FALSE(q->manager->can_swap_out(SeqId{1}));

  // Split precision: int4 keys (a packed (step, min) slot per channel per block), int8 values.
  // Per layer and block: data 2 heads * (16 * 32 / 2 + 16 * 32) = 1536 bytes, scales
  // 2 * (32 + 16) slots = 384 bytes; four layers: 7680 bytes.
  cfg.k_dtype = config::KvDtype::kInt4;
  cfg.v_dtype = config::KvDtype::kInt8;
  auto s = MakeHostKvCache(cfg, ModelDims(), base::Logger());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->storage->layout().k_dtype(), config::KvDtype::kInt4);
  EXPECT_EQ(s->storage->layout().v_dtype(), config::KvDtype::kInt8);
  EXPECT_EQ(s->storage->layout().bytes_per_block(), 7680u);
  EXPECT_EQ(s->manager->usage().total_blocks, 213);  // 1638405 / 7680
}

TEST(HostKvCache, RejectsUnusableConfigs) {
  config::CacheConfig cfg;
  cfg.block_size = 12;
  EXPECT_EQ(MakeHostKvCache(cfg, ModelDims(), base::Logger()).status().code(),
            absl::StatusCode::kInvalidArgument);
  cfg.block_size = 256;
  EXPECT_FALSE(MakeHostKvCache(cfg, ModelDims(), base::Logger()).ok());
  cfg.block_size = 16;
  cfg.kv_bytes = 100;  // less than one block
  const auto st = MakeHostKvCache(cfg, ModelDims(), base::Logger()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cache.kv_bytes"), std::string::npos) << st;
  cfg.kv_bytes = 1 << 20;
  EXPECT_FALSE(MakeHostKvCache(cfg, KvLayout{}, base::Logger()).ok());
}

TEST(CacheSizing, DeviceBudgetIsUtilizationOfTotalLessThePeakInUse) {
  config::CacheConfig cfg;
  cfg.gpu_memory_utilization = 0.9;
  // 1000 bytes device, weights + profiling activations + other processes peak at 300.
  EXPECT_EQ(DeviceKvBudgetBytes(cfg, {1000, 300}), 600u);
  cfg.gpu_memory_utilization = 0.5;
  EXPECT_EQ(DeviceKvBudgetBytes(cfg, {1000, 300}), 200u);
  EXPECT_EQ(DeviceKvBudgetBytes(cfg, {1000, 700}), 0u);  // nothing left: no negative budget
  cfg.gpu_memory_utilization = 2.0;                       // clamped to the whole device
  EXPECT_EQ(DeviceKvBudgetBytes(cfg, {1000, 300}), 700u);
  KvLayout l = ModelDims();
  EXPECT_EQ(UsableBlocksForBudget(l.bytes_per_block() * 7 + 1, l), 7);
  EXPECT_EQ(UsableBlocksForBudget(1ull << 62, l), std::numeric_limits<int32_t>::max() - 1);
}

}  // namespace
}  // namespace kvserve::cache
