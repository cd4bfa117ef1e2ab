// Paged KV cache bookkeeping throughput (no KV bytes are touched, except in the dequantize
// benchmark). items_per_second counts block operations: one block allocated, freed,
// appended or matched is one item. Target (issue 4): >= 10 M block ops/s on one core.
//
//   BM_BlockPoolAllocateRelease  raw pool: pop from / push to the LRU free queue
//   BM_AllocateFree              manager: allocate a 1024-token sequence (64 blocks), free it
//   BM_AppendDecode              manager: grow a sequence one token at a time to 1024 tokens
//                                (items = tokens appended; 1 in 16 takes a block)
//   BM_PrefixMatch               manager: a 513-token prompt hits 32 cached blocks, then free
//   BM_CommitFullBlocks          manager: allocate 1024 tokens, hash + publish 64 blocks, free
//   BM_DequantizeRows            kernel inner loop: one (block, head) run of 16 x 128
//                                (items = elements)
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache_manager.h"
#include "config/fields.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::cache {
namespace {

constexpr int kBlockSize = 16;

std::unique_ptr<KvCacheManager> MakeManager(int32_t blocks) {
  KvCacheManagerOptions o;
  o.layout.num_layers = 1;
  o.layout.num_kv_heads = 1;
  o.layout.head_dim = 64;
  o.layout.block_size = kBlockSize;
  o.num_blocks = blocks + 1;
  return std::make_unique<KvCacheManager>(o, base::Logger());
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 100 + i * 7;
  return t;
}

void BM_BlockPoolAllocateRelease(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  BlockPool pool(n + 1);
  std::vector<BlockId> got(n);
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) got[i] = *pool.allocate();
    for (int i = n - 1; i >= 0; --i) pool.release(got[i]);
    benchmark::DoNotOptimize(got.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * n);
}
BENCHMARK(BM_BlockPoolAllocateRelease)->Arg(64)->Arg(4096);

void BM_AllocateFree(benchmark::State& state) {
  auto m = MakeManager(4096);
  const int tokens = 1024;
  for (auto _ : state) {
    auto d = m->allocate(SeqId{1}, tokens);
    benchmark::DoNotOptimize(d);
    m->free(SeqId{1});
  }
  state.SetItemsProcessed(state.iterations() * 2 * (tokens / kBlockSize));
}
BENCHMARK(BM_AllocateFree);

void BM_AppendDecode(benchmark::State& state) {
  auto m = MakeManager(4096);
  const int tokens = 1024;
  for (auto _ : state) {
    for (int i = 0; i < tokens; ++i) {
      auto d = m->allocate(SeqId{1}, 1);
      benchmark::DoNotOptimize(d);
    }
    m->free(SeqId{1});
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_AppendDecode);

void BM_PrefixMatch(benchmark::State& state) {
  auto m = MakeManager(4096);
  const PrefixKey key = MakePrefixKey("model", "tenant", "");
  const std::vector<int32_t> prompt = Tokens(513);
  m->match_prefix(SeqId{0}, prompt, key);
  m->allocate(SeqId{0}, 513);
  m->commit_full_blocks(SeqId{0}, prompt);
  int64_t matched = 0;
  for (auto _ : state) {
    const PrefixMatch hit = m->match_prefix(SeqId{1}, prompt, key);
    matched += hit.num_blocks;
    m->free(SeqId{1});
  }
  if (matched != state.iterations() * 32) state.SkipWithError("prefix did not hit 32 blocks");
  state.SetItemsProcessed(matched);
}
BENCHMARK(BM_PrefixMatch);

void BM_CommitFullBlocks(benchmark::State& state) {
  auto m = MakeManager(4096);
  const PrefixKey key = MakePrefixKey("model", "tenant", "");
  const std::vector<int32_t> tokens = Tokens(1024);
  int64_t salt = 0;
  for (auto _ : state) {
    // A fresh key each round: every commit publishes new content (and evicts old).
    PrefixKey k = key;
    k.cache_salt = static_cast<uint64_t>(++salt);
    m->match_prefix(SeqId{1}, std::span(tokens).first(1), k);
    m->allocate(SeqId{1}, 1024);
    m->commit_full_blocks(SeqId{1}, tokens);
    m->free(SeqId{1});
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_CommitFullBlocks);

void BM_DequantizeRows(benchmark::State& state) {
  const auto dtype = static_cast<config::KvDtype>(state.range(0));
  constexpr int kDim = 128, kRows = 16;
  std::vector<float> src(kRows * kDim), dst(kRows * kDim), scales(kRows);
  for (int i = 0; i < kRows * kDim; ++i) src[i] = static_cast<float>((i * 37) % 101) / 17.0f - 3.0f;
  std::vector<std::byte> q(kRows * kDim * KvDtypeBytes(dtype));
  for (int r = 0; r < kRows; ++r) {
    kernels::cpu::QuantizeRow(&src[r * kDim], kDim, dtype, &q[r * kDim * KvDtypeBytes(dtype)],
                              &scales[r]);
  }
  for (auto _ : state) {
    kernels::cpu::DequantizeRows(q.data(), scales.data(), kRows, kDim, dtype, dst.data());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * kDim);
  state.SetLabel(std::string(config::Name(dtype)));
}
BENCHMARK(BM_DequantizeRows)->DenseRange(0, 4);

}  // namespace
}  // namespace kvserve::cache
