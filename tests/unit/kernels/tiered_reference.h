// The check both tiered-attention tests share (tiered_attention_test, low_rank_keys_test):
// random queries through PagedAttentionTiered and AttentionMassTiered on two compute
// threads, compared with double-precision attention over each sequence's reference rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::kernels::cpu::testing {

// Sequences of a tiered block table: rows[s] query rows (the last ones) over kv_lens[s]
// entries; ref_k[s] / ref_v[s] hold what entry i of KV head g decodes to, at
// (i * kv_heads + g) * head_dim (float or double). Mass is checked over mass_stride slots.
template <typename T>
void ExpectTieredAttentionMatchesReference(std::span<const KvTierView> views, const PagedSeqs& seqs,
                                           const int* rows, int heads, int mass_stride,
                                           const std::vector<std::vector<T>>& ref_k,
                                           const std::vector<std::vector<T>>& ref_v, std::mt19937& gen,
                                           double tol) {
  const int hd = views[0].layout.head_dim;
  const int kv_heads = views[0].layout.num_kv_heads;
  const int num_seqs = seqs.num_seqs;
  const int total_rows = seqs.seq_starts[num_seqs];
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(total_rows) * heads * hd);
  for (auto& x : q) x = nd(gen);
  const int threads = SetComputeThreads(2);
  std::vector<float> ws(PagedAttentionWorkspaceFloats(views[0].layout, heads, threads));
  std::vector<float> out(q.size()), lse(static_cast<size_t>(total_rows) * heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttentionTiered(views, seqs, q.data(), heads * hd, heads, scale, out.data(), heads * hd, lse.data(), ws.data(),
                       ws.size());
  std::vector<float> mass(static_cast<size_t>(num_seqs) * kv_heads * mass_stride, 0.0f);
  AttentionMassTiered(views, seqs, q.data(), heads * hd, heads, scale, lse.data(), mass.data(), mass_stride, ws.data(),
                      ws.size());
  SetComputeThreads(0);

  for (int s = 0; s < num_seqs; ++s) {
    std::vector<double> want_mass(static_cast<size_t>(kv_heads) * mass_stride, 0.0);
    for (int j = 0; j < rows[s]; ++j) {
      const int row = seqs.seq_starts[s] + j;
      const int len = seqs.kv_lens[s] - rows[s] + j + 1;
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        const float* qh = &q[(static_cast<size_t>(row) * heads + h) * hd];
        std::vector<double> p(static_cast<size_t>(len));
        double mx = -1e300;
        for (int i = 0; i < len; ++i) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) {
            dot += static_cast<double>(qh[d]) * ref_k[s][(static_cast<size_t>(i) * kv_heads + g) * hd + d];
          }
          p[static_cast<size_t>(i)] = dot * scale;
          mx = std::max(mx, p[static_cast<size_t>(i)]);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        // lse pins the scores themselves (for low-rank keys: the projected dot products).
        EXPECT_NEAR(lse[static_cast<size_t>(row) * heads + h], mx + std::log(sum), tol);
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int i = 0; i < len; ++i) {
            o += p[static_cast<size_t>(i)] / sum * ref_v[s][(static_cast<size_t>(i) * kv_heads + g) * hd + d];
          }
          ASSERT_NEAR(out[(static_cast<size_t>(row) * heads + h) * hd + d], o, tol)
              << "seq " << s << " row " << j << " head " << h << " dim " << d;
        }
        for (int i = 0; i < len; ++i) want_mass[static_cast<size_t>(g) * mass_stride + i] += p[static_cast<size_t>(i)] / sum;
      }
    }
    for (int g = 0; g < kv_heads; ++g) {
      for (int i = 0; i < mass_stride; ++i) {
        ASSERT_NEAR(mass[(static_cast<size_t>(s) * kv_heads + g) * mass_stride + i],
                    want_mass[static_cast<size_t>(g) * mass_stride + i], tol)
            << "seq " << s << " kv head " << g << " slot " << i;
      }
    }
  }
}

}  // namespace kvserve::kernels::cpu::testing
