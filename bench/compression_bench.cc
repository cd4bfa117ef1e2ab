// Cost of one compression round on the CPU reference (score + select + compact), per policy
// and KV dtype, at the default budget B = 2048 and beta = 128 with the bundled model's shape
// (4 layers, 4 query / 2 KV heads, head_dim 48) and random KV. Each iteration appends beta
// fresh slots (untimed) and runs the round that brings the sequence back to B.
#include <benchmark/benchmark.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "base/clock.h"
#include "compression/host_kv_access.h"
#include "compression/policy_factory.h"
#include "compression/triattention_stats.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::compression {
namespace {

constexpr int kLayers = 4, kQHeads = 4, kKvHeads = 2, kHeadDim = 48, kBlockSize = 16;
constexpr int64_t kBudget = 2048, kBeta = 128, kPrompt = 64;

struct Setup {
  explicit Setup(config::KvDtype dtype) {
    layout.num_layers = kLayers;
    layout.num_kv_heads = kKvHeads;
    layout.head_dim = kHeadDim;
    layout.block_size = kBlockSize;
    layout.dtype = dtype;
    const int64_t cap = kBudget + kBeta;
    const int64_t blocks = (cap + kBlockSize - 1) / kBlockSize;
    table.resize(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> row(kHeadDim);
    for (int l = 0; l < kLayers; ++l) {
      data.emplace_back(blocks * layout.block_elems() * layout.elem_bytes() / 4 + 1, 0.0f);
      data_ptrs.push_back(reinterpret_cast<std::byte*>(data.back().data()));
      if (layout.has_scales()) {
        scales.emplace_back(blocks * layout.block_scales(), 0.0f);
        scale_ptrs.push_back(scales.back().data());
      }
      for (int64_t b = 0; b < blocks; ++b)
        for (int kv = 0; kv < 2; ++kv)
          for (int h = 0; h < kKvHeads; ++h)
            for (int o = 0; o < kBlockSize; ++o) {
              for (float& x : row) x = nd(rng);
              kernels::cpu::WriteKvRow(layout, data_ptrs.back(), layout.has_scales() ? scale_ptrs.back() : nullptr,
                                       b, kv, h, o, row.data());
            }
    }
    inv_freq.resize(kHeadDim / 2);
    for (int f = 0; f < kHeadDim / 2; ++f) inv_freq[f] = static_cast<float>(std::pow(10000.0, -2.0 * f / kHeadDim));
    stats.num_layers = kLayers;
    stats.num_q_heads = kQHeads;
    stats.num_kv_heads = kKvHeads;
    stats.head_dim = kHeadDim;
    stats.inv_freq.assign(inv_freq.begin(), inv_freq.end());
    std::normal_distribution<double> nd64(0.0, 1.0);
    stats.entries.resize(static_cast<size_t>(kLayers) * kQHeads * kHeadDim / 2);
    for (FreqStat& e : stats.entries) {
      e.a_re = nd64(rng);
      e.a_im = nd64(rng);
      e.m = std::hypot(e.a_re, e.a_im) + 0.5;
    }
  }
  HostKvAccess& Access() {
    if (access == nullptr) access = std::make_unique<HostKvAccess>(layout, data_ptrs, scale_ptrs);
    return *access;
  }
  std::unique_ptr<HostKvAccess> access;

  cache::KvLayout layout;
  std::vector<int32_t> table;
  std::vector<std::vector<float>> data, scales;
  std::vector<std::byte*> data_ptrs;
  std::vector<float*> scale_ptrs;
  std::vector<float> inv_freq;
  TriAttentionStats stats;
  base::SteadyClock clock;
};

void BM_Round(benchmark::State& state, config::CompressionPolicyKind kind, config::KvDtype dtype) {
  Setup s(dtype);
  PolicyParams p;
  p.kind = kind;
  p.budget = kBudget;
  p.divide_length = kBeta;
  p.prompt_len = kPrompt;
  p.window = 64;
  PolicyContext c{kLayers, kQHeads, kKvHeads, kHeadDim, s.inv_freq, &s.stats, &s.clock};
  auto policy = CreatePolicy(p, c);
  if (!policy.ok()) {
    state.SkipWithError(std::string(policy.status().message()).c_str());
    return;
  }
  SlotState slots = (*policy)->NewSlotState();
  slots.Reserve(kBudget + kBeta);
  int64_t next = 0;
  std::vector<float> q(kQHeads * kHeadDim, 0.5f);
  std::vector<int32_t> qpos(1);
  auto grow = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      qpos[0] = static_cast<int32_t>(next + i);
      (*policy)->ObserveQueries(slots, QueryView{q.data(), 0, kQHeads * kHeadDim, qpos.data(), 1});
    }
    slots.Append(next, n);
    next += n;
  };
  grow(kBudget);
  int64_t bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    grow(kBeta);
    state.ResumeTiming();
    auto r = (*policy)->Run({&s.Access(), s.table, slots.size(), &slots, next});
    if (!r.ok() || !r->compacted) {
      state.SkipWithError("round failed");
      return;
    }
    bytes += r->bytes_moved;
  }
  state.counters["bytes_moved/round"] = benchmark::Counter(static_cast<double>(bytes) / state.iterations());
}

using config::CompressionPolicyKind;
using config::KvDtype;
BENCHMARK_CAPTURE(BM_Round, triattention_fp32, CompressionPolicyKind::kTriAttention, KvDtype::kFp32)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Round, triattention_int8, CompressionPolicyKind::kTriAttention, KvDtype::kInt8)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Round, snapkv_fp32, CompressionPolicyKind::kSnapKv, KvDtype::kFp32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Round, h2o_fp32, CompressionPolicyKind::kH2O, KvDtype::kFp32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Round, streamingllm_fp32, CompressionPolicyKind::kStreamingLlm, KvDtype::kFp32)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve::compression

BENCHMARK_MAIN();
