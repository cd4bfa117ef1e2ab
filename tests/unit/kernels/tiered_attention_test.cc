// Mixed-precision block tables (kernels/cpu/paged_attention.h, KvTierView): a sequence whose
// blocks live in tiers of different K/V dtypes (fp32, int8, int4, bf16 / int4) attends
// exactly as naive attention over each block's dequantized rows, and attention mass too; a
// one-tier table of tagged entries equals the plain PagedAttention bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/paged_attention.h"
#include "tests/unit/kernels/tiered_reference.h"

namespace kvserve::kernels::cpu {
namespace {

using config::KvDtype;

struct Tier {
  cache::KvLayout layout;
  std::vector<std::byte> data;
  std::vector<float> scales;
  Tier(KvDtype k, KvDtype v, int64_t blocks) {
    cache::KvLayout l;
    l.num_layers = 1;
    l.num_kv_heads = 2;
    l.head_dim = 16;
    l.block_size = 4;
    layout = cache::WithPrecision(l, k, v, 8);
    data.resize(static_cast<size_t>(blocks) * layout.block_data_bytes());
    scales.resize(static_cast<size_t>(blocks) * std::max<size_t>(layout.block_scales(), 1));
  }
  KvTierView View() const { return {layout, data.data(), scales.data()}; }
};

TEST(TieredAttention, MixedDtypeTableEqualsAttentionOverDequantizedKv) {
  std::vector<Tier> tiers;
  tiers.emplace_back(KvDtype::kFp32, KvDtype::kFp32, 8);
  tiers.emplace_back(KvDtype::kInt8, KvDtype::kInt8, 8);
  tiers.emplace_back(KvDtype::kInt4, KvDtype::kInt4, 8);
  tiers.emplace_back(KvDtype::kBf16, KvDtype::kInt4, 8);
  const int hd = 16, kv_heads = 2, heads = 4, bs = 4;
  // Two sequences; table entries name (tier, block). Demoted blocks first, the growing
  // full-precision tail last, as a demotion round leaves them.
  const std::vector<std::vector<std::pair<int, int>>> layout = {
      {{2, 0}, {2, 3}, {1, 1}, {3, 2}, {0, 5}, {0, 2}},
      {{1, 4}, {3, 0}, {0, 0}},
  };
  const int kv_len[] = {23, 10};
  const int rows[] = {3, 1};  // this step's query rows (the last ones)
  std::mt19937 gen(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int32_t> table, offsets{0}, starts{0}, lens;
  // Reference rows: what each slot decodes to, per (seq, index, kv, head).
  std::vector<std::vector<float>> ref_k(2), ref_v(2);
  for (int s = 0; s < 2; ++s) {
    for (auto [t, b] : layout[s]) table.push_back(TieredBlock(t, b));
    offsets.push_back(static_cast<int32_t>(table.size()));
    starts.push_back(starts.back() + rows[s]);
    lens.push_back(kv_len[s]);
    ref_k[s].resize(static_cast<size_t>(kv_len[s]) * kv_heads * hd);
    ref_v[s].resize(ref_k[s].size());
    // Write every slot, block by block in slot order (int4 keys widen per block).
    for (int i = 0; i < kv_len[s]; ++i) {
      auto [t, b] = layout[s][i / bs];
      Tier& tier = tiers[static_cast<size_t>(t)];
      for (int h = 0; h < kv_heads; ++h) {
        std::vector<float> k(hd), v(hd);
        for (auto& x : k) x = nd(gen);
        for (auto& x : v) x = nd(gen);
        WriteKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 0, h, i % bs, k.data());
        WriteKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 1, h, i % bs, v.data());
      }
    }
    for (int i = 0; i < kv_len[s]; ++i) {
      auto [t, b] = layout[s][i / bs];
      const Tier& tier = tiers[static_cast<size_t>(t)];
      for (int h = 0; h < kv_heads; ++h) {
        const size_t at = (static_cast<size_t>(i) * kv_heads + h) * hd;
        ReadKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 0, h, i % bs, &ref_k[s][at]);
        ReadKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 1, h, i % bs, &ref_v[s][at]);
      }
    }
  }
  std::vector<KvTierView> views;
  for (const Tier& t : tiers) views.push_back(t.View());
  const PagedSeqs seqs{2, starts.data(), lens.data(), offsets.data(), table.data()};
  testing::ExpectTieredAttentionMatchesReference(std::span<const KvTierView>(views), seqs, rows, heads,
                                                 /*mass_stride=*/32, ref_k, ref_v, gen, 2e-5);
}

TEST(TieredAttention, OneTierOfTaggedEntriesIsThePlainKernel) {
  Tier t(KvDtype::kInt8, KvDtype::kFp16, 6);
  std::mt19937 gen(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int hd = 16, heads = 4, len = 20;
  const std::vector<int32_t> table{3, 0, 5, 1, 2};
  for (int i = 0; i < len; ++i) {
    for (int h = 0; h < 2; ++h) {
      std::vector<float> k(hd), v(hd);
      for (auto& x : k) x = nd(gen);
      for (auto& x : v) x = nd(gen);
      WriteKvRow(t.layout, t.data.data(), t.scales.data(), table[i / 4], 0, h, i % 4, k.data());
      WriteKvRow(t.layout, t.data.data(), t.scales.data(), table[i / 4], 1, h, i % 4, v.data());
    }
  }
  const int32_t starts[] = {0, 2}, lens[] = {len}, offsets[] = {0, 5};
  std::vector<float> q(2 * heads * hd);
  for (auto& x : q) x = nd(gen);
  std::vector<float> ws(PagedAttentionWorkspaceFloats(t.layout, heads, ComputeThreads()));
  std::vector<float> a(q.size()), b(q.size());
  const PagedSeqs plain{1, starts, lens, offsets, table.data()};
  PagedAttention(t.layout, t.data.data(), t.scales.data(), plain, q.data(), heads * hd, heads, 0.25f, a.data(),
                 heads * hd, nullptr, ws.data(), ws.size());
  std::vector<int32_t> tagged;
  for (int32_t id : table) tagged.push_back(TieredBlock(0, id));
  const PagedSeqs tiered{1, starts, lens, offsets, tagged.data()};
  const KvTierView view = t.View();
  PagedAttentionTiered({&view, 1}, tiered, q.data(), heads * hd, heads, 0.25f, b.data(), heads * hd, nullptr,
                       ws.data(), ws.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

}  // namespace
}  // namespace kvserve::kernels::cpu
