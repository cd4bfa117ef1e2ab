// Pipeline stages of the CPU model in one process: stage 0 (embedding, layers [0, b)) hands
// its residual stream to stage 1 (layers [b, L), final norm, lm_head) through a loopback
// StageLink that runs stage 1 inline. Checked against the whole model: the logits of mixed
// prefill and decode steps are bit-identical, each stage holds its own layers' weights and
// KV only, and a stage short of an end refuses to load without a link.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"
#include "parallel/pipeline_link.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"

namespace kvserve::parallel {
namespace {

namespace hf = kvserve::testing::hf;

constexpr int kBlockSize = 4;
constexpr int kBlocks = 32;

// Stage 0's HandOff runs stage 1 right away on the same batch.
class LoopbackLink final : public model::StageLink {
 public:
  model::LlamaModel* next = nullptr;
  model::HostKvBuffer* next_kv = nullptr;
  int handoffs = 0;

  absl::Status BeginStep(int64_t, std::span<const cache::BlockCopy>,
                         std::span<const cache::BlockCopy>,
                         std::span<const cache::BlockCopy>) override {
    return absl::OkStatus();
  }
  absl::Status ReceiveHidden(std::span<float> x) override {
    if (x.size() != x_.size()) return absl::DataLossError("hidden size");
    std::copy(x_.begin(), x_.end(), x.begin());
    return absl::OkStatus();
  }
  absl::Status HandOff(const model::ForwardBatch& batch, std::span<const float> x,
                       std::span<float> logits) override {
    ++handoffs;
    x_.assign(x.begin(), x.end());
    return next->Forward(batch, next_kv->view(), logits);
  }
  absl::Status EndStep() override { return absl::OkStatus(); }

 private:
  std::vector<float> x_;
};

class PipelineStageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ =
        ::testing::TempDir() + "/pipeline_stage_" + std::to_string(::getpid()) + "_" + GetParam();
    hf::FixtureSpec spec = GetParam() == "mixtral"  ? hf::MixtralPreset()
                           : GetParam() == "gemma3" ? hf::Gemma3Preset()
                                                    : hf::LlamaPreset();
    if (GetParam() == "llama") spec.num_hidden_layers = 5;  // stages of 2 and 3 layers
    ASSERT_TRUE(hf::WriteRandomCheckpoint(spec, dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<model::LlamaModel> Load(int begin, int end, model::StageLink* link) {
    model::ModelOptions o;
    o.threads = 1;
    o.max_tokens_per_step = 64;
    o.layer_begin = begin;
    o.layer_end = end;
    o.stage_link = link;
    auto m = model::LlamaModel::Load(dir_, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  std::string dir_;
};

// Runs the same three steps (two prefills, then a mixed chunk + decode step, then two
// decodes) on `model` over `kv`; returns every step's logits.
std::vector<std::vector<float>> RunSteps(model::LlamaModel& model, model::HostKvBuffer& kv) {
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> table_a = {7, 3, 12, 1, 20, 9};  // scattered block ids
  std::vector<int32_t> table_b = {5, 30, 2, 17, 11, 4};
  std::vector<int32_t> a = {1, 17, 42, 99, 5, 8, 13, 200, 31, 64, 77};
  std::vector<int32_t> b = {1, 250, 3, 4};
  std::vector<std::vector<float>> out;
  auto step = [&](model::BatchBuilder& builder) {
    std::vector<float> logits(static_cast<size_t>(builder.num_logits_rows()) * vocab);
    const absl::Status st = model.Forward(builder.batch(), kv.view(), logits);
    EXPECT_TRUE(st.ok()) << st;
    out.push_back(std::move(logits));
  };
  model::BatchBuilder s1(kBlockSize);
  s1.AddSequence(std::span(a).first(7), 0, 0, table_a, model::LogitsWanted::kAll);
  s1.AddSequence(b, 0, 0, table_b, model::LogitsWanted::kLast);
  step(s1);
  model::BatchBuilder s2(kBlockSize);
  s2.AddSequence(std::span(a).subspan(7), 7, 7, table_a, model::LogitsWanted::kAll);
  const int32_t next_b[] = {60};
  s2.AddSequence(next_b, 4, 4, table_b, model::LogitsWanted::kLast);
  step(s2);
  model::BatchBuilder s3(kBlockSize);
  const int32_t next_a[] = {9}, next_b2[] = {61};
  s3.AddSequence(next_a, 11, 11, table_a, model::LogitsWanted::kLast);
  s3.AddSequence(next_b2, 5, 5, table_b, model::LogitsWanted::kLast);
  step(s3);
  return out;
}

TEST_P(PipelineStageTest, TwoStagesGiveTheWholeModelsLogitsBitForBit) {
  auto whole = Load(0, 0, nullptr);
  ASSERT_NE(whole, nullptr);
  const int layers = whole->config().num_layers;
  const StageLayers first = StageLayersFor(layers, 0, 2), second = StageLayersFor(layers, 1, 2);
  ASSERT_EQ(first.end, second.begin);
  LoopbackLink link;
  auto stage0 = Load(first.begin, first.end, &link);
  auto stage1 = Load(second.begin, second.end, &link);
  ASSERT_NE(stage0, nullptr);
  ASSERT_NE(stage1, nullptr);

  model::HostKvBuffer whole_kv(whole->KvLayoutFor(kBlockSize, config::KvDtype::kFp32), kBlocks);
  model::HostKvBuffer kv0(stage0->KvLayoutFor(kBlockSize, config::KvDtype::kFp32), kBlocks);
  model::HostKvBuffer kv1(stage1->KvLayoutFor(kBlockSize, config::KvDtype::kFp32), kBlocks);
  link.next = stage1.get();
  link.next_kv = &kv1;

  const auto expected = RunSteps(*whole, whole_kv);
  const auto got = RunSteps(*stage0, kv0);
  EXPECT_EQ(link.handoffs, 3);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t s = 0; s < got.size(); ++s) {
    ASSERT_EQ(got[s].size(), expected[s].size());
    EXPECT_EQ(std::memcmp(got[s].data(), expected[s].data(), got[s].size() * sizeof(float)), 0)
        << "step " << s;
  }

  // Each stage holds its layers' KV and weights only; together exactly the whole model's.
  EXPECT_EQ(kv0.view().layout.num_layers, first.end - first.begin);
  EXPECT_EQ(kv1.view().layout.num_layers, second.end - second.begin);
  EXPECT_EQ(stage0->weights().resident_bytes() + stage1->weights().resident_bytes(),
            whole->weights().resident_bytes());
  EXPECT_TRUE(stage0->weights().lm_head().empty());
  EXPECT_FALSE(stage1->weights().lm_head().empty());
  EXPECT_TRUE(stage0->weights().layer(second.begin).qkv.empty());
  EXPECT_TRUE(stage1->weights().layer(first.begin).qkv.empty());
}

TEST_P(PipelineStageTest, AStageShortOfAnEndNeedsALink) {
  model::ModelOptions o;
  o.threads = 1;
  o.layer_end = 1;
  auto m = model::LlamaModel::Load(dir_, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("stage link"), std::string::npos) << m.status();
  o.layer_begin = 1;
  o.layer_end = 99;
  LoopbackLink link;
  o.stage_link = &link;
  m = model::LlamaModel::Load(dir_, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layer range"), std::string::npos) << m.status();
}

INSTANTIATE_TEST_SUITE_P(Architectures, PipelineStageTest,
                         ::testing::Values("llama", "mixtral", "gemma3"));

TEST(StageLayersFor, ContiguousAndBalanced) {
  for (int layers : {2, 3, 4, 5, 7, 32}) {
    for (int stages = 1; stages <= std::min(layers, 4); ++stages) {
      int at = 0;
      for (int s = 0; s < stages; ++s) {
        const StageLayers l = StageLayersFor(layers, s, stages);
        EXPECT_EQ(l.begin, at);
        EXPECT_GE(l.end - l.begin, layers / stages);
        EXPECT_LE(l.end - l.begin, layers / stages + 1);
        at = l.end;
      }
      EXPECT_EQ(at, layers);
    }
  }
}

}  // namespace
}  // namespace kvserve::parallel
