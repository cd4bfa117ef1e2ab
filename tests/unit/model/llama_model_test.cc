// The forward pass against the float64 numpy reference of the random fixtures
// (tests/fixtures/model/make_tiny_models.py): the same tokens as (a) one prefill, (b) token
// by token, (c) chunked prefill, (d) mixed into batches with other sequences must all give
// the reference logits within 1e-4, and greedy decoding the reference continuation.
#include <cmath>
#include <tuple>

#include "tests/unit/model/model_test_util.h"

namespace kvserve::model {
namespace {

using testing::Argmax;
using testing::FixtureDir;
using testing::LoadReference;
using testing::MaxAbsDiff;
using testing::PagedSession;
using testing::ReferencePrompt;

constexpr double kTol = 1e-4;

std::unique_ptr<LlamaModel> LoadFixture(const std::string& variant, int threads, int max_tokens = 256) {
  ModelOptions opts;
  opts.threads = threads;
  opts.max_tokens_per_step = max_tokens;
  auto m = LlamaModel::Load(FixtureDir(variant), opts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t begin, size_t end) {
  return {v.begin() + static_cast<int64_t>(begin), v.begin() + static_cast<int64_t>(end)};
}

class FixtureModelTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    model_ = LoadFixture(std::get<0>(GetParam()), std::get<1>(GetParam()));
    ASSERT_NE(model_, nullptr);
    vocab_ = model_->config().vocab_size;
    ref_ = LoadReference(std::get<0>(GetParam()), vocab_);
    ASSERT_FALSE(ref_.empty());
  }
  // Checks rows [first, first + n) of prompt p against `logits` ([n][vocab]).
  void ExpectRows(const ReferencePrompt& p, size_t first, const std::vector<float>& logits, const char* what) {
    const size_t n = logits.size() / vocab_;
    for (size_t r = 0; r < n; ++r) {
      const double diff = MaxAbsDiff(logits.data() + r * vocab_, p.logits.data() + (first + r) * vocab_, vocab_);
      ASSERT_LE(diff, kTol) << what << ": position " << first + r;
    }
  }
  std::unique_ptr<LlamaModel> model_;
  int vocab_ = 0;
  std::vector<ReferencePrompt> ref_;
};

TEST_P(FixtureModelTest, OnePrefill) {
  for (const auto& p : ref_) {
    PagedSession session(*model_, 4, config::KvDtype::kFp32, 64);
    const int s = session.NewSequence();
    auto out = session.Step({{s, p.ids}});
    ExpectRows(p, 0, out[0], "prefill");
  }
}

TEST_P(FixtureModelTest, TokenByTokenDecode) {
  for (const auto& p : ref_) {
    PagedSession session(*model_, 4, config::KvDtype::kFp32, 64);
    const int s = session.NewSequence();
    for (size_t i = 0; i < p.ids.size(); ++i) {
      auto out = session.Step({{s, {p.ids[i]}}});
      ExpectRows(p, i, out[0], "decode");
    }
  }
}

TEST_P(FixtureModelTest, ChunkedPrefill) {
  for (int block_size : {4, 16}) {
    for (const auto& p : ref_) {
      PagedSession session(*model_, block_size, config::KvDtype::kFp32, 64);
      const int s = session.NewSequence();
      size_t pos = 0;
      for (size_t chunk : {3, 5, 1, 7, 100}) {
        const size_t end = std::min(p.ids.size(), pos + chunk);
        if (end == pos) break;
        auto out = session.Step({{s, Slice(p.ids, pos, end)}});
        ExpectRows(p, pos, out[0], "chunk");
        pos = end;
      }
    }
  }
}

TEST_P(FixtureModelTest, MixedBatchWithOtherSequences) {
  // Every prompt advances by its own chunk schedule; each step also carries a distractor
  // sequence of random tokens. All reference prompts share every step.
  PagedSession session(*model_, 4, config::KvDtype::kFp32, 128, /*seed=*/11);
  std::vector<int> seqs;
  for (size_t i = 0; i < ref_.size(); ++i) seqs.push_back(session.NewSequence());
  const int distractor = session.NewSequence();
  std::vector<size_t> pos(ref_.size(), 0);
  const std::vector<std::vector<size_t>> schedule = {{4, 1, 2}, {1, 1, 9}, {6, 1, 1}, {1, 3, 2}, {100, 100, 100}};
  std::mt19937 gen(3);
  for (const auto& chunks : schedule) {
    std::vector<PagedSession::Work> work;
    std::vector<std::pair<size_t, size_t>> spans;  // (prompt, first position)
    for (size_t i = 0; i < ref_.size(); ++i) {
      const size_t end = std::min(ref_[i].ids.size(), pos[i] + chunks[i % chunks.size()]);
      if (end == pos[i]) continue;
      work.push_back({seqs[i], Slice(ref_[i].ids, pos[i], end)});
      spans.emplace_back(i, pos[i]);
      pos[i] = end;
    }
    work.insert(work.begin() + static_cast<int64_t>(work.size() / 2),
                {distractor, {static_cast<int32_t>(gen() % vocab_), static_cast<int32_t>(gen() % vocab_)}});
    auto out = session.Step(work);
    size_t k = 0;
    for (size_t w = 0; w < work.size(); ++w) {
      if (work[w].seq == distractor) continue;
      ExpectRows(ref_[spans[k].first], spans[k].second, out[w], "mixed");
      ++k;
    }
  }
  for (size_t i = 0; i < ref_.size(); ++i) EXPECT_EQ(pos[i], ref_[i].ids.size());
}

TEST_P(FixtureModelTest, GreedyContinuationMatchesReference) {
  // All prompts decode together, one token per sequence per step.
  PagedSession session(*model_, 4, config::KvDtype::kFp32, 128);
  std::vector<PagedSession::Work> work;
  for (const auto& p : ref_) work.push_back({session.NewSequence(), p.ids});
  auto out = session.Step(work);
  std::vector<std::vector<int32_t>> generated(ref_.size());
  for (size_t step = 0; step < ref_[0].greedy.size(); ++step) {
    for (size_t i = 0; i < ref_.size(); ++i) {
      const float* last = out[i].data() + out[i].size() - vocab_;
      generated[i].push_back(Argmax(last, vocab_));
      work[i].tokens = {generated[i].back()};
    }
    out = session.Step(work);
  }
  for (size_t i = 0; i < ref_.size(); ++i) EXPECT_EQ(generated[i], ref_[i].greedy) << "prompt " << i;
}

TEST_P(FixtureModelTest, PositionsAreInputsNotSlots) {
  // A constant shift of every position leaves attention scores unchanged (RoPE is
  // relative), so the logits must still match: positions come from the batch, not the cache.
  for (const auto& p : ref_) {
    PagedSession session(*model_, 4, config::KvDtype::kFp32, 64);
    const int s = session.NewSequence();
    auto out = session.Step({{s, Slice(p.ids, 0, 3), 100}});
    ExpectRows(p, 0, out[0], "shifted");
    out = session.Step({{s, Slice(p.ids, 3, p.ids.size()), 100}});
    ExpectRows(p, 3, out[0], "shifted");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureModelTest,
                         ::testing::Combine(::testing::Values("llama_f32", "qwen2_bf16", "llama3_f16"),
                                            ::testing::Values(1, 2)),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_threads" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// Narrow KV dtypes: the same prompts through a quantized cache stay close to the reference.
class KvDtypeModelTest : public ::testing::TestWithParam<std::tuple<config::KvDtype, double>> {};

TEST_P(KvDtypeModelTest, LogitsStayCloseToReference) {
  auto model = LoadFixture("llama_f32", 2);
  ASSERT_NE(model, nullptr);
  const int vocab = model->config().vocab_size;
  const auto [dtype, tol] = GetParam();
  for (const auto& p : LoadReference("llama_f32", vocab)) {
    PagedSession session(*model, 4, dtype, 64);
    const int s = session.NewSequence();
    auto out = session.Step({{s, Slice(p.ids, 0, 4)}});
    auto rest = session.Step({{s, Slice(p.ids, 4, p.ids.size())}});
    out[0].insert(out[0].end(), rest[0].begin(), rest[0].end());
    EXPECT_LE(MaxAbsDiff(out[0].data(), p.logits.data(), out[0].size()), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvDtypeModelTest,
                         ::testing::Values(std::make_tuple(config::KvDtype::kFp16, 5e-3),
                                           std::make_tuple(config::KvDtype::kBf16, 5e-2),
                                           std::make_tuple(config::KvDtype::kInt8, 5e-2),
                                           std::make_tuple(config::KvDtype::kFp8E4M3, 3e-1)));

TEST(LlamaModelObservers, AttentionMassAndPreRopeQueries) {
  auto model = LoadFixture("llama_f32", 2);
  ASSERT_NE(model, nullptr);
  const auto& c = model->config();
  PagedSession session(*model, 4, config::KvDtype::kFp32, 64);
  const int a = session.NewSequence();
  const int b = session.NewSequence();
  session.Step({{a, {1, 5, 9, 17, 33}}});  // a: 5 cached entries

  const int64_t stride = 8;
  std::vector<float> mass(static_cast<size_t>(c.num_layers) * 2 * c.num_kv_heads * stride, -1.0f);
  // The step's 4 rows of pre-RoPE queries for every layer, in a buffer the caller owns.
  const int64_t q_size = c.q_size();
  std::vector<float> pre_rope(static_cast<size_t>(c.num_layers * 4 * q_size), -7.0f);
  ForwardObservers obs;
  obs.attention_mass = mass;
  obs.mass_stride = stride;
  obs.pre_rope_queries = pre_rope;
  // a decodes one token (kv_len 6); b is a fresh 3-token prefill whose first token equals a's.
  session.Step({{a, {42}}, {b, {42, 7, 8}}}, &obs);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const float* l = pre_rope.data() + layer * 4 * q_size;
    // Every row of every layer was written.
    for (int64_t i = 0; i < 4 * q_size; ++i) ASSERT_NE(l[i], -7.0f) << "layer " << layer << " element " << i;
  }
  // Layer 0 queries are pre-RoPE: token 42 at position 5 (a) and position 0 (b) agree, and
  // differ from token 7's.
  for (int i = 0; i < q_size; ++i) ASSERT_FLOAT_EQ(pre_rope[i], pre_rope[q_size + i]);
  EXPECT_NE(std::vector<float>(pre_rope.begin(), pre_rope.begin() + q_size),
            std::vector<float>(pre_rope.begin() + 2 * q_size, pre_rope.begin() + 3 * q_size));

  const int group = c.num_heads / c.num_kv_heads;
  const int rows[2] = {1, 3};
  const int kv_len[2] = {6, 3};
  for (int layer = 0; layer < c.num_layers; ++layer) {
    for (int s = 0; s < 2; ++s) {
      for (int g = 0; g < c.num_kv_heads; ++g) {
        const float* m = mass.data() + ((static_cast<int64_t>(layer) * 2 + s) * c.num_kv_heads + g) * stride;
        double total = 0;
        for (int i = 0; i < stride; ++i) {
          if (i >= kv_len[s]) {
            EXPECT_EQ(m[i], 0.0f) << "beyond kv_len";
          } else {
            EXPECT_GT(m[i], 0.0f);
          }
          total += m[i];
        }
        EXPECT_NEAR(total, rows[s] * group, 1e-4);
      }
    }
  }
  // b's last slot is seen only by its last row: mass <= group.
  EXPECT_LE(mass[(0 * 2 + 1) * c.num_kv_heads * stride + 2], group + 1e-5);
}

TEST(LlamaModelValidation, BadBatchesAreRejectedBeforeTouchingTheCache) {
  auto model = LoadFixture("llama_f32", 1, /*max_tokens=*/8);
  ASSERT_NE(model, nullptr);
  HostKvBuffer kv(model->KvLayoutFor(4, config::KvDtype::kFp32), 4);
  std::vector<float> logits(2 * 300);
  const std::vector<int32_t> table = {2, 3};
  auto run = [&](const std::vector<int32_t>& tokens, int32_t kv_before, std::vector<int32_t> tbl,
                 size_t logits_floats = 600) {
    BatchBuilder bb(4);
    bb.AddSequence(tokens, kv_before, kv_before, tbl, LogitsWanted::kLast);
    std::vector<float> out(logits_floats);
    return model->Forward(bb.batch(), kv.view(), out);
  };
  EXPECT_TRUE(run({1, 2, 3}, 0, table).ok());
  auto expect_error = [](const absl::Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(needle), std::string::npos) << st;
  };
  expect_error(run({1, 300}, 0, table), "outside the vocabulary");
  expect_error(run({1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, {0, 1, 2}), "max_tokens_per_step");
  expect_error(run({1}, 0, {7}), "block id 7 out of range");
  expect_error(run({1}, 0, table, 10), "logits buffer too small");

  BatchBuilder bb(4);
  bb.AddSequence(std::vector<int32_t>{1, 2}, 0, 0, table, LogitsWanted::kAll);
  ForwardBatch b = bb.batch();
  const std::vector<int32_t> short_len = {1};
  b.kv_lens = short_len;
  auto before = kv.view();
  std::vector<std::byte> snapshot(before.layer_data[0], before.layer_data[0] + 64);
  expect_error(model->Forward(b, kv.view(), logits), "kv_len 1 < its 2 rows");
  EXPECT_TRUE(std::equal(snapshot.begin(), snapshot.end(), kv.view().layer_data[0]));
  EXPECT_FALSE(model->Forward(b, HostKvBuffer(model->KvLayoutFor(4, config::KvDtype::kFp32), 1).view(), logits).ok());
}

TEST(LlamaModelThreads, ResultsAgreeAcrossThreadCounts) {
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    auto model = LoadFixture("qwen2_bf16", threads);
    ASSERT_NE(model, nullptr);
    PagedSession session(*model, 8, config::KvDtype::kFp32, 32);
    const int s = session.NewSequence();
    results.push_back(session.Step({{s, {1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121}}})[0]);
  }
  // Chunks of work never depend on the thread count (kernels/cpu/compute_pool.h): bit for bit.
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[0], results[i]) << "thread count " << i + 1;
}

TEST(LlamaWeightsPacking, HalfCheckpointsStayHalf) {
  // A bf16 or fp16 checkpoint's projections are packed from its own 16-bit bytes (half the
  // bytes per step); fp32 checkpoints run on fp32 panels. The logits of all three are checked
  // against the float64 reference by FixtureModelTest.
  struct Case {
    const char* variant;
    bool bf16, fp16;
  };
  for (const auto& [variant, bf16, fp16] :
       {Case{"qwen2_bf16", true, false}, Case{"llama_f32", false, false}, Case{"llama3_f16", false, true}}) {
    auto model = LoadFixture(variant, 1);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->weights().bf16_projections(), bf16) << variant;
    EXPECT_EQ(model->weights().fp16_projections(), fp16) << variant;
    // Bytes a step streams relative to fp32 weights: about half for bf16.
    const auto& c = model->config();
    const double fp32_bytes =
        4.0 * static_cast<double>(c.num_parameters() -
                                  (c.tie_word_embeddings ? 0 : static_cast<int64_t>(c.vocab_size) * c.hidden_size));
    const double ratio = static_cast<double>(model->weights().streamed_bytes()) / fp32_bytes;
    if (bf16 || fp16) {
      EXPECT_LT(ratio, 0.6) << variant;
    } else {
      EXPECT_GT(ratio, 0.99) << variant;
    }
  }
}

}  // namespace
}  // namespace kvserve::model
