// The attention tile kernels (portable and AVX-512, kernels/cpu/attention_tile.h) over the
// geometries the AVX-512 kernel special-cases: head_dim not a multiple of 16 or 4, blocks of 8
// (half a 16-entry chunk) and of 32 and 64 (several chunks), GQA groups of 1 to 8 and tiles
// cut mid-block. Each kernel against a direct double-precision computation, each prefill row
// against its own one-row (decode-style) call bit for bit, and 1 against 2 threads bit for bit.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::kernels::cpu {
namespace {

struct Geometry {
  int head_dim, block_size, num_heads, kv_heads;
};

struct Seq {
  int rows;    // this step's query rows
  int kv_len;  // after this step
};

// fp32 KV written through WriteKv, scattered block tables, random K, V and Q.
struct Case {
  cache::KvLayout layout;
  int num_heads;
  std::vector<Seq> seqs{{37, 37}, {1, 50}, {20, 70}, {3, 9}, {1, 1}};
  std::vector<int32_t> seq_starts{0}, kv_lens, table_offsets{0}, tables;
  std::vector<float> storage, k, v, q;  // k, v: per seq, [kv_len][kv_heads][head_dim], concatenated
  std::vector<int64_t> kv_first;        // first row of each seq in k / v

  explicit Case(const Geometry& g) : num_heads(g.num_heads) {
    layout.num_layers = 1;
    layout.num_kv_heads = g.kv_heads;
    layout.head_dim = g.head_dim;
    layout.block_size = g.block_size;
    int64_t blocks = 0;
    for (const Seq& s : seqs) blocks += (s.kv_len + g.block_size - 1) / g.block_size;
    blocks += 3;
    storage.assign(blocks * layout.block_data_bytes() / sizeof(float), 0.0f);
    std::mt19937 gen(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<int32_t> free_blocks(blocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(), gen);
    const int row_floats = g.kv_heads * g.head_dim;
    for (const Seq& s : seqs) {
      for (int b = 0; b < (s.kv_len + g.block_size - 1) / g.block_size; ++b) {
        tables.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      table_offsets.push_back(static_cast<int32_t>(tables.size()));
      seq_starts.push_back(seq_starts.back() + s.rows);
      kv_lens.push_back(s.kv_len);
      kv_first.push_back(static_cast<int64_t>(k.size()) / row_floats);
      for (int i = 0; i < s.kv_len * row_floats; ++i) {
        k.push_back(dist(gen));
        v.push_back(dist(gen));
      }
    }
    q.resize(static_cast<size_t>(seq_starts.back()) * num_heads * g.head_dim);
    for (float& x : q) x = dist(gen) * 1.5f;  // peaked enough that the max matters
    std::vector<int64_t> slots;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int i = 0; i < seqs[s].kv_len; ++i) {
        slots.push_back(static_cast<int64_t>(tables[table_offsets[s] + i / g.block_size]) * g.block_size +
                        i % g.block_size);
      }
    }
    WriteKv(layout, reinterpret_cast<std::byte*>(storage.data()), nullptr, k.data(), v.data(), row_floats,
            slots.data(), static_cast<int64_t>(slots.size()));
  }

  int64_t q_stride() const { return static_cast<int64_t>(num_heads) * layout.head_dim; }
  PagedSeqs View() const {
    return {static_cast<int>(seqs.size()), seq_starts.data(), kv_lens.data(), table_offsets.data(), tables.data()};
  }
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(layout.head_dim)); }

  void Run(const PagedSeqs& view, const float* qp, float* out, float* lse) const {
    std::vector<float> ws(PagedAttentionWorkspaceFloats(layout, num_heads, ComputeThreads()));
    PagedAttention(layout, reinterpret_cast<const std::byte*>(storage.data()), nullptr, view, qp, q_stride(),
                   num_heads, Scale(), out, q_stride(), lse, ws.data(), ws.size());
  }
};

class AttentionTileTest : public ::testing::TestWithParam<std::tuple<Geometry, bool>> {
 protected:
  void SetUp() override {
    portable_ = std::get<1>(GetParam());
    internal::UsePortableAttention(portable_);
    if (!portable_ && std::string(PagedAttentionKernelName()) != "avx512") {
      GTEST_SKIP() << "no AVX-512 on this CPU: the portable runs cover it";
    }
  }
  void TearDown() override {
    internal::UsePortableAttention(false);
    SetComputeThreads(0);
  }
  bool portable_ = false;
};

TEST_P(AttentionTileTest, MatchesDirectAttention) {
  const Case c(std::get<0>(GetParam()));
  const int hd = c.layout.head_dim, group = c.num_heads / c.layout.num_kv_heads;
  const int row_floats = c.layout.num_kv_heads * hd;
  const int64_t rows = c.seq_starts.back();
  SetComputeThreads(1);
  std::vector<float> out(rows * c.q_stride()), lse(rows * c.num_heads);
  c.Run(c.View(), c.q.data(), out.data(), lse.data());
  double worst = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int j = 0; j < c.seqs[s].rows; ++j) {
      const int64_t row = c.seq_starts[s] + j;
      const int len = c.seqs[s].kv_len - c.seqs[s].rows + j + 1;
      for (int h = 0; h < c.num_heads; ++h) {
        const float* qh = c.q.data() + row * c.q_stride() + static_cast<int64_t>(h) * hd;
        const int64_t kv_head = h / group;
        std::vector<double> p(len);
        for (int i = 0; i < len; ++i) {
          const float* kr = c.k.data() + (c.kv_first[s] + i) * row_floats + kv_head * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kr[d];
          p[i] = dot * c.Scale();
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        ASSERT_NEAR(lse[row * c.num_heads + h], mx + std::log(sum), 2e-5) << "row " << row << " head " << h;
        for (int d = 0; d < hd; ++d) {
          double want = 0;
          for (int i = 0; i < len; ++i) want += p[i] / sum * c.v[(c.kv_first[s] + i) * row_floats + kv_head * hd + d];
          const double got = out[row * c.q_stride() + static_cast<int64_t>(h) * hd + d];
          worst = std::max(worst, std::abs(got - want));
          ASSERT_NEAR(got, want, 2e-5) << "row " << row << " head " << h << " d " << d;
        }
      }
    }
  }
  std::printf("%s: max |out - direct| %.3g\n", PagedAttentionKernelName(), worst);
}

// A row of a prefill tile equals the same row attended alone with the cache cut after it
// (what decode and every chunking of the prompt compute), and the thread count changes nothing.
TEST_P(AttentionTileTest, RowsAreBatchInvariant) {
  const Case c(std::get<0>(GetParam()));
  const int64_t rows = c.seq_starts.back();
  SetComputeThreads(1);
  std::vector<float> out(rows * c.q_stride()), lse(rows * c.num_heads);
  c.Run(c.View(), c.q.data(), out.data(), lse.data());
  SetComputeThreads(2);
  std::vector<float> out2(out.size()), lse2(lse.size());
  c.Run(c.View(), c.q.data(), out2.data(), lse2.data());
  ASSERT_EQ(out, out2) << "1 vs 2 threads";
  ASSERT_EQ(lse, lse2) << "1 vs 2 threads";
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int j = 0; j < c.seqs[s].rows; ++j) {
      const int64_t row = c.seq_starts[s] + j;
      const int32_t starts[2] = {0, 1};
      const int32_t kv_len = c.seqs[s].kv_len - c.seqs[s].rows + j + 1;
      const int32_t offsets[2] = {0, c.table_offsets[s + 1] - c.table_offsets[s]};
      const PagedSeqs one{1, starts, &kv_len, offsets, c.tables.data() + c.table_offsets[s]};
      std::vector<float> o(c.q_stride()), l(c.num_heads);
      c.Run(one, c.q.data() + row * c.q_stride(), o.data(), l.data());
      for (int64_t i = 0; i < c.q_stride(); ++i) {
        ASSERT_EQ(o[i], out[row * c.q_stride() + i]) << "seq " << s << " row " << j << " element " << i;
      }
      for (int h = 0; h < c.num_heads; ++h) ASSERT_EQ(l[h], lse[row * c.num_heads + h]) << "seq " << s << " row " << j;
    }
  }
}

constexpr Geometry kGeometries[] = {
    {48, 16, 4, 2},   // kvs-tiny
    {64, 16, 12, 4},  // the benchmarks' random Llama: groups of 3
    {40, 8, 2, 2},    // head_dim 40 (a 16-wide tail of 8), blocks of half a chunk
    {18, 32, 8, 1},   // head_dim not a multiple of 4, two chunks per block, group of 8
    {128, 64, 2, 1},  // long rows (8 vectors), four chunks per block
};

INSTANTIATE_TEST_SUITE_P(Geometries, AttentionTileTest,
                         ::testing::Combine(::testing::ValuesIn(kGeometries), ::testing::Bool()),
                         [](const auto& p) {
                           const Geometry& g = std::get<0>(p.param);
                           return "hd" + std::to_string(g.head_dim) + "_bs" + std::to_string(g.block_size) + "_h" +
                                  std::to_string(g.num_heads) + "_kv" + std::to_string(g.kv_heads) +
                                  (std::get<1>(p.param) ? "_portable" : "_avx512");
                         });

}  // namespace
}  // namespace kvserve::kernels::cpu
