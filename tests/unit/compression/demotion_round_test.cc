// One importance-aware demotion round at the kernel level, end to end: per (layer, KV head)
// scores rank the candidates (PlanDemotion), the middle ranks are re-encoded into int8 and
// int4 tier blocks (DemoteKv), the top ranks are compacted in place at full precision
// (CompactKv), the lowest are gone. Checked: each tier block holds exactly the planned
// tokens (every demoted row decodes nearest to the original row of its planned slot, and
// within its dtype's error of it), and attention over the mixed-dtype table equals naive
// attention over the dequantized rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "compression/demotion.h"
#include "kernels/cpu/kv_compact.h"
#include "kernels/cpu/kv_demote.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::compression {
namespace {

using config::KvDtype;
namespace cpu = kernels::cpu;

struct Pool {
  cache::KvLayout layout;
  std::vector<std::vector<std::byte>> data;
  std::vector<std::vector<float>> scales;
  std::vector<std::byte*> data_ptrs;
  std::vector<float*> scale_ptrs;
  Pool(KvDtype k, KvDtype v, int blocks) {
    cache::KvLayout l;
    l.num_layers = 2;
    l.num_kv_heads = 2;
    l.head_dim = 16;
    l.block_size = 4;
    layout = cache::WithPrecision(l, k, v, 8);
    for (int i = 0; i < l.num_layers; ++i) {
      data.emplace_back(static_cast<size_t>(blocks) * layout.block_data_bytes());
      scales.emplace_back(static_cast<size_t>(blocks) * std::max<size_t>(layout.block_scales(), 1));
      data_ptrs.push_back(data.back().data());
      scale_ptrs.push_back(scales.back().data());
    }
  }
  cpu::KvTierStorage Storage() const { return {layout, data_ptrs.data(), scale_ptrs.data()}; }
  cpu::KvTierView View(int layer) const { return {layout, data_ptrs[layer], scale_ptrs[layer]}; }
  std::vector<float> Read(int layer, int32_t block, int kv, int head, int off) const {
    std::vector<float> out(static_cast<size_t>(layout.head_dim));
    cpu::ReadKvRow(layout, data_ptrs[layer], scale_ptrs[layer], block, kv, head, off, out.data());
    return out;
  }
};

double Dist2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return d;
}

TEST(DemotionRound, TiersHoldThePlannedTokensAndMixedAttentionIsExact) {
  Pool full(KvDtype::kFp32, KvDtype::kFp32, 12), i8(KvDtype::kInt8, KvDtype::kInt8, 6),
      i4(KvDtype::kInt4, KvDtype::kInt4, 6);
  const int layers = 2, heads = 2, hd = 16, bs = 4, len = 40;
  const int64_t keep = 10, n8 = 12, n4 = 8;  // 10 evicted; tiers are whole blocks
  std::mt19937 gen(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int32_t> table(10);
  std::iota(table.begin(), table.end(), 1);
  std::shuffle(table.begin(), table.end(), gen);
  // originals[layer][kv][head][slot]
  std::vector<std::vector<float>> orig(static_cast<size_t>(layers * 2 * heads * len));
  auto O = [&](int l, int kv, int h, int i) -> std::vector<float>& { return orig[((l * 2 + kv) * heads + h) * len + i]; };
  for (int l = 0; l < layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < len; ++i) {
          auto& row = O(l, kv, h, i);
          row.resize(hd);
          for (auto& x : row) x = nd(gen);
          cpu::WriteKvRow(full.layout, full.data_ptrs[l], nullptr, table[i / bs], kv, h, i % bs, row.data());
        }
  // Plan every (layer, head) row from its own scores.
  std::vector<int32_t> keep_rows, rows8, rows4;
  std::vector<DemotionRow> plans;
  std::vector<int32_t> scratch;
  const int64_t sizes[] = {n8, n4};
  for (int r = 0; r < layers * heads; ++r) {
    std::vector<double> scores(len);
    for (auto& s : scores) s = nd(gen);
    DemotionRow p;
    PlanDemotion(scores, keep, sizes, 0, p, scratch);
    ASSERT_EQ(static_cast<int64_t>(p.evicted.size()), len - keep - n8 - n4);
    keep_rows.insert(keep_rows.end(), p.keep.begin(), p.keep.end());
    rows8.insert(rows8.end(), p.tiers[0].begin(), p.tiers[0].end());
    rows4.insert(rows4.end(), p.tiers[1].begin(), p.tiers[1].end());
    plans.push_back(std::move(p));
  }
  const std::vector<int32_t> table8{4, 0, 2}, table4{5, 3};
  EXPECT_GT(cpu::DemoteKv(full.Storage(), table.data(), i8.Storage(), table8.data(), rows8.data(), n8), 0);
  EXPECT_GT(cpu::DemoteKv(full.Storage(), table.data(), i4.Storage(), table4.data(), rows4.data(), n4), 0);
  const cpu::KeepPlan plan{0, len, len, keep, keep_rows.data()};
  ASSERT_TRUE(cpu::ValidateKeepPlan(full.layout, static_cast<int64_t>(table.size()), plan).ok());
  const cpu::CompactStats st =
      cpu::CompactKv(full.layout, full.data_ptrs.data(), nullptr, table.data(), plan, nullptr, 0);
  ASSERT_EQ(st.new_len, keep);

  // Each tier slot decodes nearest to the original row of its planned slot, within its error.
  auto check_tier = [&](const Pool& p, const std::vector<int32_t>& t, const std::vector<int32_t>& rows, int64_t n,
                        double max_err) {
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        for (int kv = 0; kv < 2; ++kv)
          for (int64_t i = 0; i < n; ++i) {
            const int32_t want = rows[(l * heads + h) * n + i];
            const auto got = p.Read(l, t[i / bs], kv, h, static_cast<int>(i % bs));
            int best = -1;
            double best_d = 1e300;
            for (int s = 0; s < len; ++s) {
              const double d = Dist2(got, O(l, kv, h, s));
              if (d < best_d) best_d = d, best = s;
            }
            ASSERT_EQ(best, want) << "layer " << l << " head " << h << " kv " << kv << " tier slot " << i;
            for (int c = 0; c < hd; ++c) ASSERT_NEAR(got[c], O(l, kv, h, want)[c], max_err);
          }
  };
  check_tier(i8, table8, rows8, n8, 0.03);  // max|x| / 127 / 2 for |x| < ~4
  check_tier(i4, table4, rows4, n4, 0.6);   // half a step of a <= 8-wide range over 15 steps
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h)
      for (int kv = 0; kv < 2; ++kv)
        for (int64_t i = 0; i < keep; ++i) {
          EXPECT_EQ(full.Read(l, table[i / bs], kv, h, static_cast<int>(i % bs)),
                    O(l, kv, h, plans[l * heads + h].keep[i]));
        }

  // Attention over the mixed table: [int4 x2][int8 x3][fp32 x3], kv_len 8 + 12 + 10.
  std::vector<int32_t> mixed;
  for (int32_t b : table4) mixed.push_back(cpu::TieredBlock(2, b));
  for (int32_t b : table8) mixed.push_back(cpu::TieredBlock(1, b));
  for (int i = 0; i < 3; ++i) mixed.push_back(cpu::TieredBlock(0, table[i]));
  const int kv_len = static_cast<int>(n4 + n8 + keep), qheads = 4;
  std::vector<float> q(static_cast<size_t>(qheads) * hd);
  for (auto& x : q) x = nd(gen);
  const int32_t starts[] = {0, 1}, lens[] = {kv_len}, offsets[] = {0, static_cast<int32_t>(mixed.size())};
  const cpu::PagedSeqs seqs{1, starts, lens, offsets, mixed.data()};
  const float scale = 0.25f;
  for (int l = 0; l < layers; ++l) {
    const cpu::KvTierView views[] = {full.View(l), i8.View(l), i4.View(l)};
    std::vector<float> ws(cpu::PagedAttentionWorkspaceFloats(full.layout, qheads, cpu::ComputeThreads()));
    std::vector<float> out(q.size());
    cpu::PagedAttentionTiered(views, seqs, q.data(), qheads * hd, qheads, scale, out.data(), qheads * hd, nullptr,
                              ws.data(), ws.size());
    auto row_at = [&](int kv, int h, int i) {
      const int32_t e = mixed[i / bs];
      const Pool& p = cpu::KvTierOf(e) == 0 ? full : cpu::KvTierOf(e) == 1 ? i8 : i4;
      return p.Read(l, cpu::KvTierBlock(e), kv, h, i % bs);
    };
    for (int qh = 0; qh < qheads; ++qh) {
      const int g = qh / 2;
      std::vector<double> p(kv_len);
      double mx = -1e300, sum = 0;
      for (int i = 0; i < kv_len; ++i) {
        const auto k = row_at(0, g, i);
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[qh * hd + d]) * k[d];
        mx = std::max(mx, p[i] = dot * scale);
      }
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int i = 0; i < kv_len; ++i) o += p[i] / sum * row_at(1, g, i)[d];
        ASSERT_NEAR(out[qh * hd + d], o, 2e-5) << "layer " << l << " head " << qh << " dim " << d;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::compression
