// Low-rank keys (kernels/cpu/low_rank_keys.h, kv_tier.h, paged_attention.h): against direct
// double-precision computations on random data and a random orthonormal basis.
//   - scores in the low-rank space, (U^T q) . c + q . mu, equal the dot products with the
//     projected keys mu + U U^T (k - mu);
//   - a low-rank tier's rows read back as their projections, and projecting a projection
//     gives the same coefficients (moving a token between rounds loses nothing);
//   - attention (and attention mass) over a block table mixing full-width and low-rank blocks
//     equals naive attention over the projected (and, for bf16 / int8 coefficients, dequantized)
//     keys, with the full blocks' keys exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_tier.h"
#include "kernels/cpu/low_rank_keys.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/sym_eigen.h"
#include "tests/unit/kernels/tiered_reference.h"

namespace kvserve::kernels::cpu {
namespace {

using config::KvDtype;

// A random orthonormal basis of R^hd (the eigenvectors of a random symmetric matrix) and a
// random mean, packed as low_rank_keys.h lays out one head at rank r.
struct Basis {
  int hd = 0;
  std::vector<double> mu;
  std::vector<double> axes;  // [hd][hd], row i = axis i
  Basis(int head_dim, std::mt19937& gen) : hd(head_dim) {
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<double> a(static_cast<size_t>(hd) * hd);
    for (int i = 0; i < hd; ++i) {
      for (int j = i; j < hd; ++j) a[static_cast<size_t>(i) * hd + j] = a[static_cast<size_t>(j) * hd + i] = nd(gen);
    }
    auto e = EigenSymmetric(a, hd);
    EXPECT_TRUE(e.ok()) << e.status();
    axes = e->vectors;
    mu.resize(static_cast<size_t>(hd));
    for (auto& x : mu) x = 0.5 * nd(gen);
  }
  // Orthonormal (PCA-like): P = R = the top `rank` axes.
  std::vector<float> Packed(int rank) const {
    std::vector<float> p(LowRankHeadFloats(hd, rank));
    for (int d = 0; d < hd; ++d) p[static_cast<size_t>(d)] = static_cast<float>(mu[static_cast<size_t>(d)]);
    for (int j = 0; j < rank; ++j) {
      for (int d = 0; d < hd; ++d) {
        const float a = static_cast<float>(axes[static_cast<size_t>(j) * hd + d]);
        p[static_cast<size_t>(1 + j) * hd + d] = a;
        p[static_cast<size_t>(1 + rank + j) * hd + d] = a;
      }
    }
    return p;
  }
  // The coefficients, in double, of k: P (k - mu) (from the float basis the kernels see, so
  // only the kernels' arithmetic differs).
  std::vector<double> Coeffs(const std::vector<float>& packed, int rank, const float* k) const {
    std::vector<double> c(static_cast<size_t>(rank));
    for (int j = 0; j < rank; ++j) {
      for (int d = 0; d < hd; ++d) {
        c[static_cast<size_t>(j)] += static_cast<double>(packed[static_cast<size_t>(1 + j) * hd + d]) *
                                     (static_cast<double>(k[d]) - packed[static_cast<size_t>(d)]);
      }
    }
    return c;
  }
  std::vector<double> Reconstruct(const std::vector<float>& packed, int rank, const std::vector<double>& c) const {
    std::vector<double> k(static_cast<size_t>(hd));
    for (int d = 0; d < hd; ++d) {
      k[static_cast<size_t>(d)] = packed[static_cast<size_t>(d)];
      for (int j = 0; j < rank; ++j) {
        k[static_cast<size_t>(d)] += c[static_cast<size_t>(j)] * packed[static_cast<size_t>(1 + rank + j) * hd + d];
      }
    }
    return k;
  }
};

TEST(LowRankKeys, LowRankScoresEqualTheProjectedDotProducts) {
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int hd = 48;
  const Basis basis(hd, gen);
  for (int rank : {1, 8, 24, 48}) {
    const std::vector<float> packed = basis.Packed(rank);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> q(hd), k(hd), c(static_cast<size_t>(rank)), q_r(static_cast<size_t>(rank));
      for (auto& x : q) x = nd(gen);
      for (auto& x : k) x = 2.0f * nd(gen);
      ProjectKeys(packed.data(), hd, rank, k.data(), hd, 1, c.data());
      const float off = ProjectQuery(packed.data(), hd, rank, q.data(), q_r.data());
      double low = off;
      for (int j = 0; j < rank; ++j) low += static_cast<double>(q_r[static_cast<size_t>(j)]) * c[static_cast<size_t>(j)];
      // Direct: q . (mu + U U^T (k - mu)), in double.
      const std::vector<double> k_hat = basis.Reconstruct(packed, rank, basis.Coeffs(packed, rank, k.data()));
      double direct = 0.0, norm = 0.0;
      for (int d = 0; d < hd; ++d) {
        direct += static_cast<double>(q[static_cast<size_t>(d)]) * k_hat[static_cast<size_t>(d)];
        norm += std::abs(static_cast<double>(q[static_cast<size_t>(d)]) * k_hat[static_cast<size_t>(d)]);
      }
      ASSERT_NEAR(low, direct, 2e-6 * (1.0 + norm)) << "rank " << rank << " trial " << trial;
      // The coefficients themselves, against the double projection.
      const std::vector<double> c_ref = basis.Coeffs(packed, rank, k.data());
      for (int j = 0; j < rank; ++j) ASSERT_NEAR(c[static_cast<size_t>(j)], c_ref[static_cast<size_t>(j)], 2e-5);
    }
  }
}

// An oblique basis (P != R, P R^T = I, as the query-aware basis is): scores in the low-rank
// space still equal q . (mu + R^T P (k - mu)), and projecting a reconstruction gives c back.
TEST(LowRankKeys, ObliqueBasisScoresAreTheReconstructedDotProducts) {
  std::mt19937 gen(8);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int hd = 12, rank = 5;
  const Basis basis(hd, gen);
  // W = Q diag(s) Q^T with s in [0.5, 3]: P = V^T W, R = V^T W^-1 for V the top axes.
  std::vector<double> s(static_cast<size_t>(hd));
  for (auto& x : s) x = 0.5 + 2.5 * std::abs(nd(gen)) / 3.0;
  const Basis rot(hd, gen);
  auto apply = [&](bool inverse, const double* v, double* out) {
    for (int x = 0; x < hd; ++x) out[x] = 0.0;
    for (int i = 0; i < hd; ++i) {
      const double* q = &rot.axes[static_cast<size_t>(i) * hd];
      double dot = 0.0;
      for (int d = 0; d < hd; ++d) dot += q[d] * v[d];
      const double f = inverse ? 1.0 / s[static_cast<size_t>(i)] : s[static_cast<size_t>(i)];
      for (int x = 0; x < hd; ++x) out[x] += f * dot * q[x];
    }
  };
  std::vector<float> packed(LowRankHeadFloats(hd, rank));
  for (int d = 0; d < hd; ++d) packed[static_cast<size_t>(d)] = static_cast<float>(basis.mu[static_cast<size_t>(d)]);
  std::vector<double> pw(static_cast<size_t>(hd)), rw(static_cast<size_t>(hd));
  for (int j = 0; j < rank; ++j) {
    apply(false, &basis.axes[static_cast<size_t>(j) * hd], pw.data());
    apply(true, &basis.axes[static_cast<size_t>(j) * hd], rw.data());
    for (int d = 0; d < hd; ++d) {
      packed[static_cast<size_t>(1 + j) * hd + d] = static_cast<float>(pw[static_cast<size_t>(d)]);
      packed[static_cast<size_t>(1 + rank + j) * hd + d] = static_cast<float>(rw[static_cast<size_t>(d)]);
    }
  }
  std::normal_distribution<float> nf(0.0f, 1.0f);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> q(hd), k(hd), c(rank), c2(rank), q_r(rank), back(hd);
    for (auto& x : q) x = nf(gen);
    for (auto& x : k) x = nf(gen);
    ProjectKeys(packed.data(), hd, rank, k.data(), hd, 1, c.data());
    const float off = ProjectQuery(packed.data(), hd, rank, q.data(), q_r.data());
    double low = off;
    for (int j = 0; j < rank; ++j) low += static_cast<double>(q_r[static_cast<size_t>(j)]) * c[static_cast<size_t>(j)];
    const std::vector<double> k_hat = basis.Reconstruct(packed, rank, basis.Coeffs(packed, rank, k.data()));
    double direct = 0.0;
    for (int d = 0; d < hd; ++d) direct += static_cast<double>(q[static_cast<size_t>(d)]) * k_hat[static_cast<size_t>(d)];
    ASSERT_NEAR(low, direct, 1e-5 * (1.0 + std::abs(direct)));
    ReconstructKeys(packed.data(), hd, rank, c.data(), 1, back.data());
    ProjectKeys(packed.data(), hd, rank, back.data(), hd, 1, c2.data());
    for (int j = 0; j < rank; ++j) ASSERT_NEAR(c2[static_cast<size_t>(j)], c[static_cast<size_t>(j)], 1e-4);
  }
}

TEST(LowRankKeys, FullRankIsExactAndProjectionIsIdempotent) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int hd = 32;
  const Basis basis(hd, gen);
  std::vector<float> k(hd), back(hd);
  for (auto& x : k) x = nd(gen);
  // Full rank: the basis spans everything, k comes back.
  const std::vector<float> full = basis.Packed(hd);
  std::vector<float> c(hd), c2(hd);
  ProjectKeys(full.data(), hd, hd, k.data(), hd, 1, c.data());
  ReconstructKeys(full.data(), hd, hd, c.data(), 1, back.data());
  for (int d = 0; d < hd; ++d) ASSERT_NEAR(back[static_cast<size_t>(d)], k[static_cast<size_t>(d)], 1e-5);
  // Rank 7: projecting the reconstruction gives the same coefficients, and the residual
  // k - k^ is orthogonal to every kept axis.
  const int r = 7;
  const std::vector<float> low = basis.Packed(r);
  ProjectKeys(low.data(), hd, r, k.data(), hd, 1, c.data());
  ReconstructKeys(low.data(), hd, r, c.data(), 1, back.data());
  ProjectKeys(low.data(), hd, r, back.data(), hd, 1, c2.data());
  for (int j = 0; j < r; ++j) ASSERT_NEAR(c2[static_cast<size_t>(j)], c[static_cast<size_t>(j)], 1e-5);
  double residual_energy = 0.0;
  for (int d = 0; d < hd; ++d) residual_energy += std::pow(k[static_cast<size_t>(d)] - back[static_cast<size_t>(d)], 2);
  EXPECT_GT(residual_energy, 1e-2);  // rank 7 of 32 cannot hold a random key
}

struct Tier {
  cache::KvLayout layout;
  std::vector<std::byte> data;
  std::vector<float> scales;
  std::vector<float> basis;             // one layer, every KV head (packed)
  std::vector<std::byte*> data_ptrs;
  std::vector<float*> scale_ptrs;
  std::vector<const float*> basis_ptrs;
  Tier(KvDtype k, KvDtype v, int rank, int64_t blocks, const std::vector<Basis>& bases) {
    cache::KvLayout l;
    l.num_layers = 1;
    l.num_kv_heads = 2;
    l.head_dim = 16;
    l.block_size = 4;
    layout = cache::WithPrecision(l, k, v, 8);
    layout.key_rank = rank;
    data.resize(static_cast<size_t>(blocks) * layout.block_data_bytes());
    scales.resize(static_cast<size_t>(blocks) * std::max<size_t>(layout.block_scales(), 1));
    if (rank > 0) {
      for (const Basis& b : bases) {
        const std::vector<float> p = b.Packed(rank);
        basis.insert(basis.end(), p.begin(), p.end());
      }
    }
    data_ptrs = {data.data()};
    scale_ptrs = {scales.data()};
    basis_ptrs = {basis.data()};
  }
  KvTierStorage Storage() const {
    return {layout, data_ptrs.data(), scale_ptrs.data(), 64, layout.key_rank > 0 ? basis_ptrs.data() : nullptr};
  }
  KvTierView View() const {
    return {layout, data.data(), scales.data(), layout.key_rank > 0 ? basis.data() : nullptr};
  }
};

TEST(LowRankKeys, MixedFullAndLowRankTableEqualsAttentionOverProjectedKeys) {
  const int hd = 16, kv_heads = 2, heads = 4, bs = 4;
  std::mt19937 gen(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<Basis> bases{Basis(hd, gen), Basis(hd, gen)};
  std::vector<Tier> tiers;
  tiers.emplace_back(KvDtype::kFp32, KvDtype::kFp32, 0, 8, bases);  // the pool: full keys
  tiers.emplace_back(KvDtype::kFp32, KvDtype::kFp32, 6, 8, bases);  // exact coefficients
  tiers.emplace_back(KvDtype::kBf16, KvDtype::kInt4, 9, 8, bases);  // bf16 coefficients, int4 values
  tiers.emplace_back(KvDtype::kInt8, KvDtype::kInt8, 3, 8, bases);  // int8 coefficients
  // Demoted (low-rank) blocks first, the pool's tail last, as a demotion round leaves them.
  const std::vector<std::vector<std::pair<int, int>>> plan = {
      {{1, 2}, {2, 0}, {3, 5}, {2, 3}, {0, 5}, {0, 1}},
      {{2, 4}, {1, 0}, {0, 0}},
  };
  const int kv_len[] = {22, 11};
  const int rows[] = {3, 2};
  std::vector<int32_t> table, offsets{0}, starts{0}, lens;
  std::vector<std::vector<double>> ref_k(2), ref_v(2);
  for (int s = 0; s < 2; ++s) {
    for (auto [t, b] : plan[s]) table.push_back(TieredBlock(t, b));
    offsets.push_back(static_cast<int32_t>(table.size()));
    starts.push_back(starts.back() + rows[s]);
    lens.push_back(kv_len[s]);
    ref_k[s].resize(static_cast<size_t>(kv_len[s]) * kv_heads * hd);
    ref_v[s].resize(ref_k[s].size());
    for (int i = 0; i < kv_len[s]; ++i) {
      auto [t, b] = plan[s][static_cast<size_t>(i / bs)];
      Tier& tier = tiers[static_cast<size_t>(t)];
      const KvTierStorage st = tier.Storage();
      for (int h = 0; h < kv_heads; ++h) {
        std::vector<float> k(hd), v(hd);
        for (auto& x : k) x = 1.5f * nd(gen);
        for (auto& x : v) x = nd(gen);
        WriteTierRows(st, 0, b, 0, h, i % bs, 1, k.data(), hd);
        WriteTierRows(st, 0, b, 1, h, i % bs, 1, v.data(), hd);
        const size_t at = (static_cast<size_t>(i) * kv_heads + h) * hd;
        std::vector<float> v_dec(hd);
        ReadKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 1, h, i % bs, v_dec.data());
        for (int d = 0; d < hd; ++d) ref_v[s][at + d] = v_dec[static_cast<size_t>(d)];
        if (t == 0) {
          for (int d = 0; d < hd; ++d) ref_k[s][at + d] = k[static_cast<size_t>(d)];
          continue;
        }
        // The key the reference attends to: mu + U c, with c the stored coefficients (exact
        // projections for fp32 coefficients, their dequantized codes otherwise).
        const int r = tier.layout.key_rank;
        const std::vector<float> packed = bases[static_cast<size_t>(h)].Packed(r);
        std::vector<double> c;
        if (tier.layout.k_dtype() == KvDtype::kFp32) {
          c = bases[static_cast<size_t>(h)].Coeffs(packed, r, k.data());
        } else {
          std::vector<float> stored(static_cast<size_t>(r));
          ReadKvRow(tier.layout, tier.data.data(), tier.scales.data(), b, 0, h, i % bs, stored.data());
          c.assign(stored.begin(), stored.end());
        }
        const std::vector<double> k_hat = bases[static_cast<size_t>(h)].Reconstruct(packed, r, c);
        for (int d = 0; d < hd; ++d) ref_k[s][at + d] = k_hat[static_cast<size_t>(d)];
        // ReadTierRow hands the same projected key to demotion rounds and TriAttention.
        std::vector<float> read(hd);
        ReadTierRow(st, 0, b, 0, h, i % bs, read.data());
        for (int d = 0; d < hd; ++d) ASSERT_NEAR(read[static_cast<size_t>(d)], k_hat[static_cast<size_t>(d)], 1e-4);
      }
    }
  }
  std::vector<KvTierView> views;
  for (const Tier& t : tiers) views.push_back(t.View());
  const PagedSeqs seqs{2, starts.data(), lens.data(), offsets.data(), table.data()};
  testing::ExpectTieredAttentionMatchesReference(std::span<const KvTierView>(views), seqs, rows, heads,
                                                 /*mass_stride=*/24, ref_k, ref_v, gen, 5e-5);
}

TEST(LowRankKeys, LayoutCountsCoefficientsNotHeadDim) {
  cache::KvLayout l;
  l.num_layers = 4;
  l.num_kv_heads = 2;
  l.head_dim = 48;
  l.block_size = 16;
  const cache::KvLayout full = cache::WithPrecision(l, KvDtype::kBf16, KvDtype::kInt8, 32);
  cache::KvLayout low = full;
  low.key_rank = 12;
  EXPECT_EQ(low.row_bytes(0), 12u * 2u);
  EXPECT_EQ(low.row_bytes(1), full.row_bytes(1));
  EXPECT_DOUBLE_EQ(low.side_bytes_per_token(0), full.side_bytes_per_token(0) * 12.0 / 48.0);
  EXPECT_FALSE(low.uniform());
  EXPECT_FALSE(cache::SameKvLayout(low, full));
  cache::KvLayout int4 = cache::WithPrecision(l, KvDtype::kInt4, KvDtype::kInt4, 32);
  int4.key_rank = 10;
  EXPECT_EQ(int4.run_scales(0), 10u);  // one channel scale per coefficient
  EXPECT_EQ(int4.row_bytes(0), 5u);
}

TEST(SymmetricEigen, DecomposesAndRejectsBadInput) {
  std::mt19937 gen(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int n = 9;
  std::vector<double> a(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    for (int j = i; j < n; ++j) a[static_cast<size_t>(i) * n + j] = a[static_cast<size_t>(j) * n + i] = nd(gen);
  }
  auto e = EigenSymmetric(a, n);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int i = 0; i < n; ++i) {
    if (i > 0) {
      EXPECT_GE(e->values[static_cast<size_t>(i) - 1], e->values[static_cast<size_t>(i)]);
    }
    const double* v = &e->vectors[static_cast<size_t>(i) * n];
    for (int r = 0; r < n; ++r) {  // A v = lambda v
      double av = 0;
      for (int c = 0; c < n; ++c) av += a[static_cast<size_t>(r) * n + c] * v[c];
      ASSERT_NEAR(av, e->values[static_cast<size_t>(i)] * v[r], 1e-9);
    }
    for (int j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < n; ++d) dot += v[d] * e->vectors[static_cast<size_t>(j) * n + d];
      ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-12);
    }
  }
  EXPECT_EQ(EigenSymmetric(a, n + 1).status().code(), absl::StatusCode::kInvalidArgument);
  a[3] = std::nan("");
  EXPECT_EQ(EigenSymmetric(a, n).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::kernels::cpu
