// Low-rank key bases (compression/key_basis.h, key_pca.h): the PCA against a direct float64
// covariance, the file format (round trip, every truncation and single-byte corruption
// refused), the model compatibility checks, and the packed form the kernels read.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "compression/key_basis.h"
#include "compression/key_pca.h"
#include "kernels/cpu/low_rank_keys.h"

namespace kvserve::compression {
namespace {

std::vector<float> InvFreq(int head_dim) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim));
  return f;
}

// Keys of (layers x heads) rows that live near a rank-3 affine subspace plus small noise.
KeyBasis Calibrated(int layers, int heads, int hd, int64_t n, std::vector<std::vector<float>>* keys_out = nullptr) {
  std::mt19937 gen(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  KeyCovarianceAccumulator acc(layers, heads, hd);
  for (int l = 0; l < layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      std::vector<float> dirs(3 * static_cast<size_t>(hd)), mu(static_cast<size_t>(hd));
      for (auto& x : dirs) x = nd(gen);
      for (auto& x : mu) x = 3.0f * nd(gen);
      std::vector<float> keys(static_cast<size_t>(n) * hd);
      for (int64_t r = 0; r < n; ++r) {
        const float z[3] = {3.0f * nd(gen), 2.0f * nd(gen), 1.5f * nd(gen)};
        for (int d = 0; d < hd; ++d) {
          float x = mu[static_cast<size_t>(d)] + 0.01f * nd(gen);
          for (int j = 0; j < 3; ++j) x += z[j] * dirs[static_cast<size_t>(j) * hd + d];
          keys[static_cast<size_t>(r) * hd + d] = x;
        }
      }
      // Added in two calls with a stride wider than head_dim half the time: accumulation
      // must not depend on how rows arrive.
      acc.Add(l, h, keys.data(), hd, n / 2);
      acc.Add(l, h, keys.data() + (n / 2) * hd, hd, n - n / 2);
      std::vector<float> queries(static_cast<size_t>(n) * hd);
      for (auto& x : queries) x = nd(gen);
      acc.AddQueries(l, h, queries.data(), hd, n);
      if (keys_out != nullptr) keys_out->push_back(std::move(keys));
    }
  }
  auto b = acc.Finish(InvFreq(hd), "test");
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

TEST(KeyPca, MatchesADirectCovarianceEigenDecomposition) {
  const int hd = 8;
  const int64_t n = 400;
  std::vector<std::vector<float>> keys;
  const KeyBasis b = Calibrated(2, 2, hd, n, &keys);
  ASSERT_EQ(b.num_tokens, n);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      const std::vector<float>& k = keys[static_cast<size_t>(l * 2 + h)];
      // Direct two-pass mean and covariance in double.
      std::vector<double> mu(hd, 0.0), cov(static_cast<size_t>(hd) * hd, 0.0);
      for (int64_t r = 0; r < n; ++r) {
        for (int d = 0; d < hd; ++d) mu[static_cast<size_t>(d)] += k[static_cast<size_t>(r) * hd + d] / double(n);
      }
      for (int64_t r = 0; r < n; ++r) {
        for (int i = 0; i < hd; ++i) {
          for (int j = 0; j < hd; ++j) {
            cov[static_cast<size_t>(i) * hd + j] += (k[static_cast<size_t>(r) * hd + i] - mu[static_cast<size_t>(i)]) *
                                                    (k[static_cast<size_t>(r) * hd + j] - mu[static_cast<size_t>(j)]) / double(n);
          }
        }
      }
      for (int d = 0; d < hd; ++d) ASSERT_NEAR(b.mean(l, h)[d], mu[static_cast<size_t>(d)], 1e-9);
      double trace = 0.0;
      for (int i = 0; i < hd; ++i) trace += cov[static_cast<size_t>(i) * hd + i];
      for (int i = 0; i < hd; ++i) {
        // C u_i = lambda_i u_i against the direct covariance.
        const double* u = b.axis(l, h, i);
        for (int r = 0; r < hd; ++r) {
          double cu = 0.0;
          for (int c = 0; c < hd; ++c) cu += cov[static_cast<size_t>(r) * hd + c] * u[c];
          ASSERT_NEAR(cu, b.variance(l, h)[i] * u[r], 1e-6 * trace);
        }
      }
      // Three directions carry the keys: rank 3 holds nearly all the variance, rank 2 not.
      EXPECT_GT(b.explained(l, h, 3), 0.999);
      EXPECT_LT(b.explained(l, h, 2), 0.98);
      EXPECT_DOUBLE_EQ(b.explained(l, h, hd), 1.0);
    }
  }
}

TEST(KeyPca, RefusesUnevenOrMissingRows) {
  KeyCovarianceAccumulator acc(1, 2, 4);
  const float k[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  acc.Add(0, 0, k, 4, 2);
  EXPECT_EQ(acc.Finish(InvFreq(4), "").status().code(), absl::StatusCode::kFailedPrecondition);
  acc.Add(0, 1, k, 4, 1);
  EXPECT_EQ(acc.Finish(InvFreq(4), "").status().code(), absl::StatusCode::kFailedPrecondition);
  acc.Add(0, 1, k, 4, 1);  // keys even now; queries missing
  acc.AddQueries(0, 0, k, 4, 2);
  EXPECT_EQ(acc.Finish(InvFreq(4), "").status().code(), absl::StatusCode::kFailedPrecondition);
  acc.AddQueries(0, 1, k, 4, 2);
  EXPECT_TRUE(acc.Finish(InvFreq(4), "").ok());
}

TEST(KeyBasisFile, RoundTripsExactlyAndThroughTheFilesystem) {
  const KeyBasis b = Calibrated(2, 1, 6, 50);
  const std::string bytes = SerializeKeyBasis(b);
  auto back = ParseKeyBasis(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeKeyBasis(*back), bytes);
  EXPECT_EQ(back->means, b.means);
  EXPECT_EQ(back->axes, b.axes);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvs_key_basis_test_" + std::to_string(::getpid()))).string();
  ASSERT_TRUE(SaveKeyBasis(b, path).ok());
  auto loaded = LoadKeyBasis(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(SerializeKeyBasis(*loaded), bytes);
  EXPECT_EQ(LoadKeyBasis(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(KeyBasisFile, RefusesEveryTruncationAndEverySingleByteCorruption) {
  const std::string bytes = SerializeKeyBasis(Calibrated(1, 2, 4, 30));
  for (size_t n = 0; n < bytes.size(); ++n) {
    ASSERT_FALSE(ParseKeyBasis(std::string_view(bytes).substr(0, n), "t").ok()) << "truncated to " << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    ASSERT_FALSE(ParseKeyBasis(bad, "c").ok()) << "byte " << i;
  }
}

TEST(KeyBasisValidate, RefusesNonOrthonormalAxesAndUnsortedVariances) {
  KeyBasis b = Calibrated(1, 1, 4, 30);
  KeyBasis skew = b;
  skew.axes[1] += 1e-3;
  EXPECT_FALSE(ValidateKeyBasis(skew).ok());
  KeyBasis order = b;
  std::swap(order.variances[0], order.variances[3]);
  EXPECT_FALSE(ValidateKeyBasis(order).ok());
  KeyBasis asym = b;
  asym.query_moments[1] += 0.5;  // (0, 1) no longer equals (1, 0)
  EXPECT_FALSE(ValidateKeyBasis(asym).ok());
  EXPECT_TRUE(ValidateKeyBasis(b).ok());
}

TEST(KeyBasisCompatible, RefusesAnotherModelWithClearErrors) {
  const KeyBasis b = Calibrated(2, 2, 8, 40);
  model::ModelConfig c;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  const std::vector<float> f = InvFreq(8);
  EXPECT_TRUE(CheckCompatible(b, c, f).ok());
  model::ModelConfig layers = c;
  layers.num_layers = 3;
  const absl::Status st = CheckCompatible(b, layers, f);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("2 layers, model has 3"), std::string::npos) << st;
  model::ModelConfig heads = c;
  heads.num_kv_heads = 1;
  EXPECT_FALSE(CheckCompatible(b, heads, f).ok());
  std::vector<float> theta = f;
  theta[1] *= 1.01f;
  EXPECT_NE(std::string(CheckCompatible(b, c, theta).message()).find("inv_freq[1]"), std::string::npos);
}

TEST(PackedKeyBasis, HoldsTheTopAxesPerHeadAndChecksTheRank) {
  const KeyBasis b = Calibrated(2, 2, 6, 40);
  EXPECT_EQ(PackedKeyBasis::Create(b, 0, KeyBasisKind::kPca).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackedKeyBasis::Create(b, 7, KeyBasisKind::kQueryAware).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto p = PackedKeyBasis::Create(b, 2, KeyBasisKind::kPca);
  ASSERT_TRUE(p.ok());
  PackedKeyBasis moved = std::move(*p);  // pointers survive a move
  const size_t per_head = kernels::cpu::LowRankHeadFloats(6, 2);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      const float* head = moved.layers()[l] + static_cast<size_t>(h) * per_head;
      for (int d = 0; d < 6; ++d) {
        EXPECT_EQ(head[d], static_cast<float>(b.mean(l, h)[d]));
        EXPECT_EQ(head[6 + d], static_cast<float>(b.axis(l, h, 0)[d]));   // P
        EXPECT_EQ(head[12 + d], static_cast<float>(b.axis(l, h, 1)[d]));
        EXPECT_EQ(head[18 + d], static_cast<float>(b.axis(l, h, 0)[d]));  // R = P for PCA
        EXPECT_EQ(head[24 + d], static_cast<float>(b.axis(l, h, 1)[d]));
      }
    }
  }
}

// The query-aware basis keeps what queries read: keys vary most along e0, but queries only
// look along e1. At rank 1, PCA keeps e0 and loses every score difference; the query-aware
// basis keeps e1, and its expected squared score error is far below PCA's. Its P and R are
// biorthogonal (P R^T = I).
TEST(PackedKeyBasis, QueryAwareBasisKeepsTheDirectionsQueriesRead) {
  const int hd = 4;
  std::mt19937 gen(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  KeyCovarianceAccumulator acc(1, 1, hd);
  std::vector<float> keys, queries;
  for (int i = 0; i < 2000; ++i) {
    const float k[4] = {10.0f * nd(gen), 1.0f * nd(gen), 0.01f * nd(gen), 0.01f * nd(gen)};
    const float q[4] = {0.0f, 3.0f * nd(gen), 0.01f * nd(gen), 0.01f * nd(gen)};
    keys.insert(keys.end(), k, k + 4);
    queries.insert(queries.end(), q, q + 4);
  }
  acc.Add(0, 0, keys.data(), hd, 2000);
  acc.AddQueries(0, 0, queries.data(), hd, 2000);
  auto b = acc.Finish(InvFreq(hd), "");
  ASSERT_TRUE(b.ok()) << b.status();
  double err[2] = {0.0, 0.0};
  const KeyBasisKind kinds[2] = {KeyBasisKind::kPca, KeyBasisKind::kQueryAware};
  for (int kind = 0; kind < 2; ++kind) {
    auto p = PackedKeyBasis::Create(*b, 1, kinds[kind]);
    ASSERT_TRUE(p.ok()) << p.status();
    const float* head = p->layers()[0];
    const float* mu = head;
    const float* pr = head + hd;
    const float* rr = head + 2 * hd;
    double pdotr = 0.0;
    for (int d = 0; d < hd; ++d) pdotr += static_cast<double>(pr[d]) * rr[d];
    EXPECT_NEAR(pdotr, 1.0, 1e-4) << "P R^T = I";
    for (int i = 0; i < 2000; ++i) {
      const float* k = &keys[static_cast<size_t>(i) * hd];
      const float* q = &queries[static_cast<size_t>(i) * hd];
      double c = 0.0;
      for (int d = 0; d < hd; ++d) c += static_cast<double>(pr[d]) * (k[d] - mu[d]);
      double s = 0.0, s_hat = 0.0;
      for (int d = 0; d < hd; ++d) {
        s += static_cast<double>(q[d]) * k[d];
        s_hat += static_cast<double>(q[d]) * (mu[d] + c * rr[d]);
      }
      err[kind] += (s - s_hat) * (s - s_hat) / 2000.0;
    }
  }
  EXPECT_GT(err[0], 1.0);             // PCA drops e1: about Var(q1) Var(k1) = 9
  EXPECT_LT(err[1], 0.01 * err[0]);   // the query-aware basis keeps it
}

}  // namespace
}  // namespace kvserve::compression
