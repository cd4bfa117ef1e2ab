// WriteKv + PagedAttention + AttentionMass on a mixed batch (fresh prefill, decode, second
// prefill chunk) with scattered block tables, for every KV dtype and several thread counts.
// Reference: naive double-precision attention over the rows read back from the cache
// (tight), and over the original fp32 rows (tolerance per dtype).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "config/fields.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::kernels::cpu {
namespace {

using config::KvDtype;

struct Seq {
  int rows;    // this step's query rows
  int kv_len;  // after this step
};

struct Fixture {
  cache::KvLayout layout;
  int num_heads = 4;
  int64_t num_blocks = 120;
  // The last sequence is big enough to take the kernels' multi-threaded path.
  std::vector<Seq> seqs{{7, 7}, {1, 23}, {5, 13}, {2, 2}, {30, 200}};
  std::vector<int32_t> seq_starts, kv_lens, table_offsets, tables;
  std::vector<float> storage, scales;
  std::vector<std::vector<float>> k_orig, v_orig;  // per seq [kv_len][kv_heads][head_dim]
  std::vector<float> q;                            // [T][num_heads * head_dim]

  // K stored as `dtype`, V as `v_dtype` (default: the same); int4 values in groups of 8.
  explicit Fixture(KvDtype dtype, std::optional<KvDtype> v_dtype = std::nullopt) {
    layout.num_layers = 1;
    layout.num_kv_heads = 2;
    layout.head_dim = 16;
    layout.block_size = 4;
    layout = cache::WithPrecision(layout, dtype, v_dtype.value_or(dtype), 8);
    storage.assign(num_blocks * layout.block_data_bytes() / sizeof(float) + 1, 0.0f);
    scales.assign(num_blocks * std::max<size_t>(layout.block_scales(), 1), 0.0f);
    std::mt19937 gen(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<int32_t> free_blocks(num_blocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(), gen);
    const int row_floats = layout.num_kv_heads * layout.head_dim;
    seq_starts = {0};
    table_offsets = {0};
    for (const Seq& s : seqs) {
      const int nblocks = (s.kv_len + layout.block_size - 1) / layout.block_size;
      for (int b = 0; b < nblocks; ++b) {
        tables.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      table_offsets.push_back(static_cast<int32_t>(tables.size()));
      seq_starts.push_back(seq_starts.back() + s.rows);
      kv_lens.push_back(s.kv_len);
      std::vector<float> k(static_cast<size_t>(s.kv_len) * row_floats), v(k.size());
      for (float& x : k) x = dist(gen);
      for (float& x : v) x = dist(gen);
      k_orig.push_back(k);
      v_orig.push_back(v);
    }
    q.resize(static_cast<size_t>(seq_starts.back()) * num_heads * layout.head_dim);
    for (float& x : q) x = dist(gen) * 0.7f;
  }

  std::byte* data() { return reinterpret_cast<std::byte*>(storage.data()); }
  float* scale_ptr() { return layout.has_scales() ? scales.data() : nullptr; }
  int64_t Slot(size_t s, int phys) const {
    return static_cast<int64_t>(tables[table_offsets[s] + phys / layout.block_size]) * layout.block_size +
           phys % layout.block_size;
  }
  PagedSeqs View() const {
    return {static_cast<int>(seqs.size()), seq_starts.data(), kv_lens.data(), table_offsets.data(), tables.data()};
  }

  // Writes everything: entries cached before this step per sequence, then the step's rows
  // in one WriteKv call (as the forward pass does).
  void WriteAll() {
    const int row_floats = layout.num_kv_heads * layout.head_dim;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int cached = seqs[s].kv_len - seqs[s].rows;
      std::vector<int64_t> slots;
      for (int i = 0; i < cached; ++i) slots.push_back(Slot(s, i));
      WriteKv(layout, data(), scale_ptr(), k_orig[s].data(), v_orig[s].data(), row_floats, slots.data(), cached);
    }
    std::vector<float> k_step, v_step;
    std::vector<int64_t> slots;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int j = 0; j < seqs[s].rows; ++j) {
        const int phys = seqs[s].kv_len - seqs[s].rows + j;
        k_step.insert(k_step.end(), k_orig[s].begin() + phys * row_floats, k_orig[s].begin() + (phys + 1) * row_floats);
        v_step.insert(v_step.end(), v_orig[s].begin() + phys * row_floats, v_orig[s].begin() + (phys + 1) * row_floats);
        slots.push_back(Slot(s, phys));
      }
    }
    WriteKv(layout, data(), scale_ptr(), k_step.data(), v_step.data(), row_floats, slots.data(),
            static_cast<int64_t>(slots.size()));
  }

  // K or V row of (seq, physical index, kv head) as stored (dequantized), or original.
  std::vector<float> Row(size_t s, int phys, int kv, int head, bool stored) {
    std::vector<float> out(layout.head_dim);
    if (stored) {
      const int64_t slot = Slot(s, phys);
      ReadKvRow(layout, data(), scale_ptr(), slot / layout.block_size, kv, head,
                static_cast<int>(slot % layout.block_size), out.data());
    } else {
      const auto& src = kv == 0 ? k_orig[s] : v_orig[s];
      std::copy_n(src.begin() + (static_cast<int64_t>(phys) * layout.num_kv_heads + head) * layout.head_dim,
                  layout.head_dim, out.begin());
    }
    return out;
  }

  struct Naive {
    std::vector<double> out;   // [T][H][hd]
    std::vector<double> lse;   // [T][H]
    std::vector<double> mass;  // [S][kv_heads][max_len]
  };
  // `variant`: window, softcap and sinks as paged_attention.h defines them.
  Naive Reference(bool stored, int mass_stride, const AttentionVariant& variant = {}) {
    const int hd = layout.head_dim, group = num_heads / layout.num_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    Naive r;
    r.out.assign(q.size(), 0.0);
    r.lse.assign(static_cast<size_t>(seq_starts.back()) * num_heads, 0.0);
    r.mass.assign(seqs.size() * layout.num_kv_heads * mass_stride, 0.0);
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int j = 0; j < seqs[s].rows; ++j) {
        const int row = seq_starts[s] + j;
        const int len = seqs[s].kv_len - seqs[s].rows + j + 1;
        for (int h = 0; h < num_heads; ++h) {
          const int g = h / group;
          const float* qh = q.data() + (static_cast<int64_t>(row) * num_heads + h) * hd;
          const int lo = variant.window > 0 ? std::max(0, len - variant.window) : 0;
          std::vector<double> sc(len, -INFINITY);
          for (int i = lo; i < len; ++i) {
            auto k = Row(s, i, 0, g, stored);
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * k[d];
            sc[i] = dot * scale;
            if (variant.softcap > 0) sc[i] = variant.softcap * std::tanh(sc[i] / variant.softcap);
          }
          const double sink = variant.sinks != nullptr ? variant.sinks[h] : -INFINITY;
          const double mx = std::max(sink, *std::max_element(sc.begin(), sc.end()));
          double sum = std::exp(sink - mx);
          for (double& x : sc) sum += (x = std::exp(x - mx));
          r.lse[row * num_heads + h] = mx + std::log(sum);
          for (int i = lo; i < len; ++i) {
            auto v = Row(s, i, 1, g, stored);
            for (int d = 0; d < hd; ++d) r.out[(static_cast<int64_t>(row) * num_heads + h) * hd + d] += sc[i] / sum * v[d];
            r.mass[(s * layout.num_kv_heads + g) * mass_stride + i] += sc[i] / sum;
          }
        }
      }
    }
    return r;
  }
};

// Each row of `out` / `lse` (from one call over the fixture's whole batch) equals the same row
// attended alone, with its sequence's cache cut at that row, bit for bit.
void ExpectRowsEqualTheirOneRowCalls(Fixture& f, float scale, const std::vector<float>& out,
                                     const std::vector<float>& lse, std::vector<float>& ws,
                                     const AttentionVariant& variant = {}) {
  const int64_t q_stride = static_cast<int64_t>(f.num_heads) * f.layout.head_dim;
  const KvTierView tier{f.layout, f.data(), f.scale_ptr()};
  for (size_t s = 0; s < f.seqs.size(); ++s) {
    for (int j = 0; j < f.seqs[s].rows; ++j) {
      const int64_t row = f.seq_starts[s] + j;
      const int32_t starts[2] = {0, 1};
      const int32_t kv_len = f.seqs[s].kv_len - f.seqs[s].rows + j + 1;
      const int32_t offsets[2] = {0, f.table_offsets[s + 1] - f.table_offsets[s]};
      const PagedSeqs one{1, starts, &kv_len, offsets, f.tables.data() + f.table_offsets[s]};
      std::vector<float> o(q_stride), l(f.num_heads);
      PagedAttentionTiered({&tier, 1}, one, f.q.data() + row * q_stride, q_stride, f.num_heads, scale, o.data(),
                           q_stride, l.data(), ws.data(), ws.size(), variant);
      for (int64_t i = 0; i < q_stride; ++i) {
        ASSERT_EQ(o[i], out[row * q_stride + i]) << "seq " << s << " row " << j << " element " << i;
      }
      for (int h = 0; h < f.num_heads; ++h) ASSERT_EQ(l[h], lse[row * f.num_heads + h]) << "seq " << s << " row " << j;
    }
  }
}

double Tolerance(KvDtype d) {
  switch (d) {
    case KvDtype::kFp32: return 2e-5;
    case KvDtype::kFp16: return 5e-3;
    case KvDtype::kBf16: return 3e-2;
    case KvDtype::kInt8: return 3e-2;
    case KvDtype::kFp8E4M3: return 1.5e-1;
    case KvDtype::kInt4: return 0.3;  // measured 0.15 (int4 values), 0.059 (int4 keys)
  }
  return 0;
}

// (KV dtype, threads, portable kernel forced): where AVX-512 exists both tile kernels run.
class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<KvDtype, int, bool>> {
 protected:
  void SetUp() override {
    threads_ = SetComputeThreads(std::get<1>(GetParam()));
    internal::UsePortableAttention(std::get<2>(GetParam()));
  }
  void TearDown() override {
    SetComputeThreads(0);
    internal::UsePortableAttention(false);
  }
  int threads_ = 1;
};

TEST_P(PagedAttentionTest, MatchesNaiveAttentionAndMass) {
  Fixture f(std::get<0>(GetParam()));
  f.WriteAll();
  const int hd = f.layout.head_dim;
  const int64_t rows = f.seq_starts.back();
  const int64_t q_stride = static_cast<int64_t>(f.num_heads) * hd;
  std::vector<float> ws(PagedAttentionWorkspaceFloats(f.layout, f.num_heads, threads_));
  std::vector<float> out(rows * q_stride, -1.0f), lse(rows * f.num_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttention(f.layout, f.data(), f.scale_ptr(), f.View(), f.q.data(), q_stride, f.num_heads, scale, out.data(),
                 q_stride, lse.data(), ws.data(), ws.size());
  const int mass_stride = 201;
  std::vector<float> mass(f.seqs.size() * f.layout.num_kv_heads * mass_stride, 0.0f);
  AttentionMass(f.layout, f.data(), f.scale_ptr(), f.View(), f.q.data(), q_stride, f.num_heads, scale, lse.data(),
                mass.data(), mass_stride, ws.data(), ws.size());

  const auto stored = f.Reference(/*stored=*/true, mass_stride);
  const auto original = f.Reference(/*stored=*/false, mass_stride);
  const double tol = Tolerance(f.layout.dtype);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], stored.out[i], 2e-5) << "element " << i;
    ASSERT_NEAR(out[i], original.out[i], tol) << "element " << i << " vs fp32 K/V";
  }
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], stored.lse[i], 2e-5);
  for (size_t i = 0; i < mass.size(); ++i) ASSERT_NEAR(mass[i], stored.mass[i], 2e-5) << "mass " << i;
  // Each query head's probabilities sum to one: the mass of (s, g) is rows_s * group.
  const int group = f.num_heads / f.layout.num_kv_heads;
  for (size_t s = 0; s < f.seqs.size(); ++s) {
    for (int g = 0; g < f.layout.num_kv_heads; ++g) {
      double total = 0;
      for (int i = 0; i < mass_stride; ++i) total += mass[(s * f.layout.num_kv_heads + g) * mass_stride + i];
      EXPECT_NEAR(total, f.seqs[s].rows * group, 1e-4);
    }
  }
}

// Prefill rows are attended in tiles; each row must equal the same row attended alone (a
// decode-style call of one row with the cache cut at that row), bit for bit, so results do
// not depend on how a prompt is chunked or batched. The 30-row sequence spans two tiles.
TEST_P(PagedAttentionTest, EveryRowEqualsItsOneRowCall) {
  Fixture f(std::get<0>(GetParam()));
  f.WriteAll();
  const int hd = f.layout.head_dim;
  const int64_t rows = f.seq_starts.back();
  const int64_t q_stride = static_cast<int64_t>(f.num_heads) * hd;
  std::vector<float> ws(PagedAttentionWorkspaceFloats(f.layout, f.num_heads, threads_));
  std::vector<float> out(rows * q_stride, -1.0f), lse(rows * f.num_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttention(f.layout, f.data(), f.scale_ptr(), f.View(), f.q.data(), q_stride, f.num_heads, scale, out.data(),
                 q_stride, lse.data(), ws.data(), ws.size());
  ExpectRowsEqualTheirOneRowCalls(f, scale, out, lse, ws);
}

TEST_P(PagedAttentionTest, NegativeSlotIsNotWritten) {
  Fixture f(std::get<0>(GetParam()));
  std::fill(f.storage.begin(), f.storage.end(), 0.0f);
  const int row_floats = f.layout.num_kv_heads * f.layout.head_dim;
  std::vector<float> k(2 * row_floats, 1.0f), v(2 * row_floats, 2.0f);
  const int64_t slots[2] = {-1, 5};
  WriteKv(f.layout, f.data(), f.scale_ptr(), k.data(), v.data(), row_floats, slots, 2);
  std::vector<float> row(f.layout.head_dim);
  ReadKvRow(f.layout, f.data(), f.scale_ptr(), 1, 0, 1, 1, row.data());  // slot 5 = block 1 offset 1
  EXPECT_NEAR(row[0], 1.0f, 1e-2);
  // Nothing else changed: every other byte is still zero.
  size_t nonzero = 0;
  const auto* bytes = reinterpret_cast<const uint8_t*>(f.storage.data());
  for (size_t i = 0; i < f.storage.size() * sizeof(float); ++i) nonzero += bytes[i] != 0;
  EXPECT_LE(nonzero, 2u * f.layout.num_kv_heads * f.layout.head_dim * f.layout.elem_bytes());
}

TEST_P(PagedAttentionTest, WriteKvOfManyRowsLandsInItsSlots) {
  Fixture f(std::get<0>(GetParam()));
  const int row_floats = f.layout.num_kv_heads * f.layout.head_dim;
  const int64_t rows = f.num_blocks * f.layout.block_size;  // every slot, shuffled
  std::vector<int64_t> slots(rows);
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937 gen(5);
  std::shuffle(slots.begin(), slots.end(), gen);
  std::vector<float> k(rows * row_floats), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i % 97) * 0.25f;
    v[i] = -static_cast<float>(i % 89) * 0.5f;
  }
  WriteKv(f.layout, f.data(), f.scale_ptr(), k.data(), v.data(), row_floats, slots.data(), rows);
  std::vector<float> got(f.layout.head_dim);
  for (int64_t t = 0; t < rows; t += 7) {
    for (int h = 0; h < f.layout.num_kv_heads; ++h) {
      const int64_t block = slots[t] / f.layout.block_size;
      const int off = static_cast<int>(slots[t] % f.layout.block_size);
      ReadKvRow(f.layout, f.data(), f.scale_ptr(), block, 0, h, off, got.data());
      for (int d = 0; d < f.layout.head_dim; ++d) {
        const float want = k[t * row_floats + h * f.layout.head_dim + d];
        ASSERT_NEAR(got[d], want, 0.07 * std::abs(want) + 0.1) << "token " << t;
      }
      ReadKvRow(f.layout, f.data(), f.scale_ptr(), block, 1, h, off, got.data());
      const float want_v = v[t * row_floats + h * f.layout.head_dim];
      ASSERT_NEAR(got[0], want_v, 0.07 * std::abs(want_v) + 0.1) << "token " << t;
    }
  }
}

// Sliding windows (shorter than a block, across blocks, longer than some sequences), Gemma 2
// soft-capping and gpt-oss sinks, alone and together, on both tile kernels: equal to the
// naive attention, a prefill row equal to its one-row call bit for bit, and the blocks that
// lie wholly before every row's window never read (they hold NaN here, as a released block
// may hold anything).
class AttentionVariantTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override {
    threads_ = SetComputeThreads(std::get<0>(GetParam()));
    internal::UsePortableAttention(std::get<1>(GetParam()));
  }
  void TearDown() override {
    SetComputeThreads(0);
    internal::UsePortableAttention(false);
  }
  int threads_ = 1;
};

TEST_P(AttentionVariantTest, WindowSoftcapAndSinksMatchNaiveAttention) {
  const float sinks[4] = {0.5f, -1.0f, 3.0f, -20.0f};
  const AttentionVariant variants[] = {{3, 0, nullptr}, {10, 0, nullptr}, {0, 2.0f, nullptr}, {0, 0, sinks},
                                       {6, 1.5f, sinks}};
  for (const AttentionVariant& variant : variants) {
    Fixture f(KvDtype::kFp32);
    f.WriteAll();
    const int hd = f.layout.head_dim;
    const int bs = f.layout.block_size;
    // A spare block of NaN stands in for every block before the step's first window.
    int32_t poison = static_cast<int32_t>(f.num_blocks) - 1;
    while (std::count(f.tables.begin(), f.tables.end(), poison) > 0) --poison;
    std::fill_n(f.storage.begin() + poison * f.layout.block_data_bytes() / sizeof(float),
                f.layout.block_data_bytes() / sizeof(float), NAN);
    std::vector<int32_t> tables = f.tables;
    for (size_t s = 0; s < f.seqs.size() && variant.window > 0; ++s) {
      const int first_lo = std::max(0, f.seqs[s].kv_len - f.seqs[s].rows + 1 - variant.window);
      for (int b = 0; (b + 1) * bs <= first_lo; ++b) tables[f.table_offsets[s] + b] = poison;
    }
    const auto stored = f.Reference(/*stored=*/true, 201, variant);
    f.tables = tables;
    const int64_t rows = f.seq_starts.back();
    const int64_t q_stride = static_cast<int64_t>(f.num_heads) * hd;
    std::vector<float> ws(PagedAttentionWorkspaceFloats(f.layout, f.num_heads, threads_));
    std::vector<float> out(rows * q_stride, -1.0f), lse(rows * f.num_heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const KvTierView tier{f.layout, f.data(), nullptr};
    PagedAttentionTiered({&tier, 1}, f.View(), f.q.data(), q_stride, f.num_heads, scale, out.data(), q_stride,
                         lse.data(), ws.data(), ws.size(), variant);
    const int mass_stride = 201;
    std::vector<float> mass(f.seqs.size() * f.layout.num_kv_heads * mass_stride, 0.0f);
    AttentionMassTiered({&tier, 1}, f.View(), f.q.data(), q_stride, f.num_heads, scale, lse.data(), mass.data(),
                        mass_stride, ws.data(), ws.size(), variant);
    const std::string what = "window " + std::to_string(variant.window) + " softcap " +
                             std::to_string(variant.softcap) + (variant.sinks ? " sinks" : "");
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], stored.out[i], 2e-5) << what << " element " << i;
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], stored.lse[i], 2e-5) << what;
    for (size_t i = 0; i < mass.size(); ++i) ASSERT_NEAR(mass[i], stored.mass[i], 2e-5) << what << " mass " << i;
    SCOPED_TRACE(what);
    ExpectRowsEqualTheirOneRowCalls(f, scale, out, lse, ws, variant);
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndKernels, AttentionVariantTest,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Bool()));

// Every (K dtype, V dtype) pair, int4 included: attention and attention mass over the
// quantized cache equal the naive computation over the dequantized K and V (tight), and
// stay near the fp32 result (the looser side's tolerance).
class SplitPrecisionAttentionTest : public ::testing::TestWithParam<std::tuple<KvDtype, KvDtype>> {
 protected:
  void SetUp() override { threads_ = SetComputeThreads(2); }
  void TearDown() override { SetComputeThreads(0); }
  int threads_ = 1;
};

TEST_P(SplitPrecisionAttentionTest, EqualsAttentionOverDequantizedKv) {
  const auto [kd, vd] = GetParam();
  Fixture f(kd, vd);
  ASSERT_EQ(f.layout.k_dtype(), kd);
  ASSERT_EQ(f.layout.v_dtype(), vd);
  f.WriteAll();
  const int hd = f.layout.head_dim;
  const int64_t rows = f.seq_starts.back();
  const int64_t q_stride = static_cast<int64_t>(f.num_heads) * hd;
  std::vector<float> ws(PagedAttentionWorkspaceFloats(f.layout, f.num_heads, threads_));
  std::vector<float> out(rows * q_stride, -1.0f), lse(rows * f.num_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttention(f.layout, f.data(), f.scale_ptr(), f.View(), f.q.data(), q_stride, f.num_heads, scale, out.data(),
                 q_stride, lse.data(), ws.data(), ws.size());
  const int mass_stride = 201;
  std::vector<float> mass(f.seqs.size() * f.layout.num_kv_heads * mass_stride, 0.0f);
  AttentionMass(f.layout, f.data(), f.scale_ptr(), f.View(), f.q.data(), q_stride, f.num_heads, scale, lse.data(),
                mass.data(), mass_stride, ws.data(), ws.size());
  const auto stored = f.Reference(/*stored=*/true, mass_stride);
  const auto original = f.Reference(/*stored=*/false, mass_stride);
  const double tol = std::max(Tolerance(kd), Tolerance(vd));
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], stored.out[i], 2e-5) << "element " << i;
    worst = std::max(worst, std::abs(out[i] - original.out[i]));
  }
  EXPECT_LE(worst, tol) << "vs fp32 K/V";
  std::printf("k=%s v=%s: max |attention - fp32 attention| %.3g\n", std::string(config::Name(kd)).c_str(),
              std::string(config::Name(vd)).c_str(), worst);
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], stored.lse[i], 2e-5);
  for (size_t i = 0; i < mass.size(); ++i) ASSERT_NEAR(mass[i], stored.mass[i], 2e-5) << "mass " << i;
}

constexpr KvDtype kPrecisions[] = {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16,
                                   KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4};
INSTANTIATE_TEST_SUITE_P(Pairs, SplitPrecisionAttentionTest,
                         ::testing::Combine(::testing::ValuesIn(kPrecisions), ::testing::ValuesIn(kPrecisions)),
                         [](const auto& p) {
                           return std::string(config::Name(std::get<0>(p.param))) + "_" +
                                  std::string(config::Name(std::get<1>(p.param)));
                         });

INSTANTIATE_TEST_SUITE_P(
    DtypesAndThreads, PagedAttentionTest,
    ::testing::Combine(::testing::Values(KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3,
                                         KvDtype::kInt8),
                       ::testing::Values(1, 2, 4), ::testing::Bool()));

}  // namespace
}  // namespace kvserve::kernels::cpu
