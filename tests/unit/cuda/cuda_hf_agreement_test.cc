// The CUDA model against the float64 reference forward (tests/support/hf_models) on the
// random-weight Hugging Face fixtures of every architecture kvserve serves (the cases of the
// CPU's KvserveAgreementTest): per-position log-probabilities of a 40-token prompt (one
// prefill step over a shuffled block table) agree to 1e-4, as the CPU model's do, and an
// 8-token greedy continuation (decode steps) equals the reference's. fp32 fixtures only: a bf16
// checkpoint runs bf16 GEMMs with bf16 activations on the device (kernels/cuda/gemm.h), which
// the float64 definition does not model.
// Needs a GPU (label gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_kv_storage.h"
#include "cuda/cuda_llama_model.h"
#include "kernels/device_probe.h"
#include "model/batch_builder.h"
#include "model/llama_model.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/hf_models/hf_test_util.h"

namespace kvserve::cuda {
namespace {

using testing::hf::FixtureDir;

constexpr double kLogprobTol = 1e-4;
constexpr int kBlock = 4;

using Case = testing::hf::AgreementFixture;

// The CPU agreement fixtures (hf_test_util.h) with fp32 weights: bf16 ones run bf16 GEMMs with
// bf16 activations on the device, which the float64 definition does not model.
std::vector<Case> Cases() {
  std::vector<Case> v;
  for (Case& c : testing::hf::AgreementFixtures()) {
    if (c.spec.dtype != testing::hf::WeightDtype::kBf16) v.push_back(std::move(c));
  }
  return v;
}

class CudaHfAgreement : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  }
};

// Log-softmax of one row of logits, in double.
std::vector<double> LogSoftmax(const float* row, int vocab) {
  double mx = row[0];
  for (int v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int v = 0; v < vocab; ++v) out[static_cast<size_t>(v)] = row[v] - lse;
  return out;
}

TEST_P(CudaHfAgreement, LogprobsAndGreedyMatchTheFloat64Reference) {
  const Case& c = GetParam();
  FixtureDir dir("cuda_" + c.name);
  ASSERT_TRUE(testing::hf::WriteRandomCheckpoint(c.spec, dir.path()).ok());
  model::ModelOptions mo;
  mo.threads = 1;
  mo.max_tokens_per_step = 64;
  mo.max_context = c.max_context;
  auto cpu = model::LlamaModel::Load(dir.path(), mo);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  CudaModelOptions co;
  co.max_tokens_per_step = 64;
  co.max_logits_rows = 16;
  auto gpu = CudaLlamaModel::Create((*cpu)->config(), (*cpu)->weights(), co);
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  const int vocab = c.spec.vocab_size;
  const cache::KvLayout layout = (*cpu)->KvLayoutFor(kBlock, config::KvDtype::kFp32);
  const int32_t blocks = 32;
  auto storage = CudaKvStorage::Create(layout, blocks);
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::vector<std::byte*> data;
  for (int l = 0; l < layout.num_layers; ++l) data.push_back((*storage)->device_layer_data(l));
  model::KvCacheView view;
  view.layout = layout;
  view.num_blocks = blocks;
  view.layer_data = data;
  std::vector<int32_t> table(blocks - 1);
  std::iota(table.begin(), table.end(), 1);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));

  // One sequence through prefill and decode steps; returns each step's logits.
  int32_t kv_len = 0;
  auto step = [&](const std::vector<int32_t>& tokens, model::LogitsWanted want) {
    model::BatchBuilder bb(kBlock);
    bb.AddSequence(tokens, kv_len, kv_len, table, want);
    kv_len += static_cast<int32_t>(tokens.size());
    std::vector<float> logits(static_cast<size_t>(bb.num_logits_rows()) * vocab);
    const absl::Status st = (*gpu)->Forward(bb.batch(), view, logits, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  };

  auto ref_model = testing::hf::ReferenceModel::Load(dir.path());
  ASSERT_TRUE(ref_model.ok()) << ref_model.status();
  const std::vector<int32_t> ids = testing::hf::TestIds(40, vocab, 0);
  const std::vector<float> got = step(ids, model::LogitsWanted::kAll);
  auto ref = (*ref_model)->Forward(ids);
  ASSERT_TRUE(ref.ok()) << ref.status();
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const std::vector<double> want = ref->LogProbs(t);
    const std::vector<double> have = LogSoftmax(got.data() + t * static_cast<size_t>(vocab), vocab);
    for (int v = 0; v < vocab; ++v)
      worst = std::max(worst, std::abs(have[v] - want[static_cast<size_t>(v)]));
  }
  std::printf("[ cuda agreement ] %s: max |logprob diff| = %.3g\n", c.name.c_str(), worst);
  EXPECT_LE(worst, kLogprobTol);

  // Greedy: a fresh sequence (the KV above is overwritten from slot 0), prefill then decode.
  kv_len = 0;
  const std::vector<int32_t> prompt = testing::hf::TestIds(c.greedy_prompt, vocab, 3);
  auto want = testing::hf::Greedy(dir.path(), prompt, 8);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<float> logits = step(prompt, model::LogitsWanted::kLast);
  std::vector<int32_t> greedy;
  for (int i = 0; i < 8; ++i) {
    const float* row = logits.data() + logits.size() - static_cast<size_t>(vocab);
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    greedy.push_back(next);
    logits = step({next}, model::LogitsWanted::kLast);
  }
  EXPECT_EQ(greedy, *want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaHfAgreement, ::testing::ValuesIn(Cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace kvserve::cuda
