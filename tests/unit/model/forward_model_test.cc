// The ForwardModel seam: callers that hold only the interface (quality evaluation,
// calibrator, compression context) see the concrete model's shape, RoPE table and forward
// pass, and the side-output buffers are validated and filled through it.
#include <numeric>

#include "absl/strings/match.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::model {
namespace {

using testing::FixtureDir;

std::unique_ptr<LlamaModel> Load() {
  ModelOptions opts;
  opts.threads = 1;
  opts.max_tokens_per_step = 64;
  auto m = LlamaModel::Load(FixtureDir("llama_f32"), opts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// One fresh sequence of `ids` through `model` (only the interface), logits of every row.
absl::Status RunSeq(ForwardModel& model, const std::vector<int32_t>& ids, HostKvBuffer& kv, std::vector<float>& logits,
                    const ForwardObservers* obs) {
  std::vector<int32_t> table(static_cast<size_t>(kv.num_blocks()));
  std::iota(table.begin(), table.end(), 0);
  BatchBuilder builder(kv.layout().block_size);
  builder.AddSequence(ids, 0, 0, table, LogitsWanted::kAll);
  logits.assign(ids.size() * static_cast<size_t>(model.config().vocab_size), 0.0f);
  return model.Forward(builder.batch(), kv.view(), logits, obs);
}

TEST(ForwardModel, InterfaceExposesTheConcreteModel) {
  auto llama = Load();
  ASSERT_NE(llama, nullptr);
  ForwardModel& m = *llama;
  EXPECT_EQ(&m.config(), &llama->config());
  EXPECT_EQ(m.rope_inv_freq().data(), llama->rope_inv_freq().data());
  EXPECT_EQ(m.rope_inv_freq().size(), static_cast<size_t>(llama->config().head_dim / 2));
  EXPECT_EQ(m.max_tokens_per_step(), 64);
  const cache::KvLayout a = m.KvLayoutFor(16, config::KvDtype::kBf16);
  const cache::KvLayout b = llama->KvLayoutFor(16, config::KvDtype::kBf16);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.dtype, config::KvDtype::kBf16);
}

TEST(ForwardModel, PreRopeQueryBufferIsFilledOncePerStepAndChecked) {
  auto llama = Load();
  ASSERT_NE(llama, nullptr);
  ForwardModel& m = *llama;
  const ModelConfig& c = m.config();
  const std::vector<int32_t> ids = {1, 5, 9, 5, 3};
  const int64_t t = static_cast<int64_t>(ids.size());
  HostKvBuffer kv(m.KvLayoutFor(4, config::KvDtype::kFp32), 4);
  std::vector<float> plain, observed;
  ASSERT_TRUE(RunSeq(m, ids, kv, plain, nullptr).ok());

  std::vector<float> q(static_cast<size_t>(c.num_layers * t * c.q_size()), 0.0f);
  ForwardObservers obs;
  obs.pre_rope_queries = q;
  HostKvBuffer kv2(m.KvLayoutFor(4, config::KvDtype::kFp32), 4);
  ASSERT_TRUE(RunSeq(m, ids, kv2, observed, &obs).ok());
  EXPECT_EQ(plain, observed) << "observing must not change the logits";
  // Token 5 at positions 1 and 3: identical pre-RoPE queries in layer 0 (before any
  // position-dependent mixing), different from token 9's.
  const auto row = [&](int layer, int r) {
    const float* p = q.data() + (static_cast<int64_t>(layer) * t + r) * c.q_size();
    return std::vector<float>(p, p + c.q_size());
  };
  EXPECT_EQ(row(0, 1), row(0, 3));
  EXPECT_NE(row(0, 1), row(0, 2));
  for (int l = 0; l < c.num_layers; ++l) EXPECT_NE(row(l, 0), std::vector<float>(c.q_size(), 0.0f)) << "layer " << l;

  std::vector<float> small(q.size() - 1);
  obs.pre_rope_queries = small;
  HostKvBuffer kv3(m.KvLayoutFor(4, config::KvDtype::kFp32), 4);
  const absl::Status st = RunSeq(m, ids, kv3, observed, &obs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "pre_rope_queries")) << st;
}

}  // namespace
}  // namespace kvserve::model
