// kvserve's mixture-of-experts path (model/moe_layer.h, the expert weights of
// model/llama_weights.h) against the Hugging Face fixtures and the float64 reference:
//  * gpt-oss's expert layer (router bias, top-k then softmax, interleaved gate/up, biases,
//    clamped SwiGLU; dequantised and MXFP4 storage) equals the reference's MoE block. Its
//    end-to-end agreement waits for attention sinks, which the CPU forward refuses until then;
//  * MXFP4 unpacked at load equals the writer's dequantised bf16 twin bit for bit;
//  * routing order, ties and renormalisation; batch invariance in the layer and the model;
//  * parameter counts and streamed bytes (Mixtral and Qwen3-MoE logits agree with the
//    reference in hf_reference_test.cc's KvserveAgreementTest).
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "kernels/cpu/packed_linear.h"
#include "model/llama_model.h"
#include "model/moe_layer.h"
#include "model/safetensors.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {
namespace {

using model::LlamaWeights;
using model::ModelConfig;

struct Loaded {
  ModelConfig config;
  LlamaWeights weights;
};

std::unique_ptr<Loaded> LoadWeights(const std::string& dir) {
  auto c = model::LoadModelConfig(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  auto ckpt = model::SafetensorsCheckpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  auto w = LlamaWeights::Load(*c, std::move(*ckpt));
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  return std::unique_ptr<Loaded>(new Loaded{std::move(*c), std::move(*w)});
}

// Rows of unit-scale values, as a normed feed-forward input has.
std::vector<float> RandomRows(int64_t rows, int d, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> h(static_cast<size_t>(rows * d));
  for (float& v : h) v = n(g);
  return h;
}

// ---------------------------------------------------------------------------------------
// gpt-oss experts against the float64 reference.

struct GptOssCase {
  std::string name;
  FixtureSpec spec;
};

class GptOssExpertTest : public ::testing::TestWithParam<GptOssCase> {};

TEST_P(GptOssExpertTest, LayerEqualsTheReferenceMoeBlock) {
  FixtureDir dir(GetParam().name);
  ASSERT_TRUE(WriteRandomCheckpoint(GetParam().spec, dir.path()).ok());
  auto loaded = LoadWeights(dir.path());
  ASSERT_NE(loaded, nullptr);
  auto ref = ReferenceModel::Load(dir.path());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const ModelConfig& c = loaded->config;
  ASSERT_EQ(c.moe.routing, model::MoeRouting::kTopKSoftmax);
  const int d = c.hidden_size;
  constexpr int64_t kRows = 13;
  model::MoeLayer moe(c, kRows);
  double worst = 0;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    SCOPED_TRACE(layer);
    const model::MoeLayerWeights* w = loaded->weights.layer(layer).moe;
    ASSERT_NE(w, nullptr);
    const std::vector<float> h = RandomRows(kRows, d, 100 + static_cast<uint32_t>(layer));
    std::vector<float> x(h.size(), 0.0f);
    moe.Forward(*w, h.data(), kRows, x.data());
    const auto chosen = moe.chosen_experts(kRows);
    EXPECT_GE(std::set<int32_t>(chosen.begin(), chosen.end()).size(), 3u)
        << "too few experts exercised";
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<double> hr(h.begin() + r * d, h.begin() + (r + 1) * d);
      auto want = (*ref)->MoeBlock(layer, hr);
      ASSERT_TRUE(want.ok()) << want.status();
      double scale = 1.0;
      for (double v : *want) scale = std::max(scale, std::abs(v));
      for (int i = 0; i < d; ++i) {
        worst = std::max(
            worst,
            std::abs(x[static_cast<size_t>(r * d + i)] - (*want)[static_cast<size_t>(i)]) / scale);
      }
    }
    // Batch invariance in the layer: each row alone gives the same bits as in the group.
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<float> one(static_cast<size_t>(d), 0.0f);
      moe.Forward(*w, h.data() + r * d, 1, one.data());
      EXPECT_EQ(std::memcmp(one.data(), x.data() + r * d, static_cast<size_t>(d) * sizeof(float)),
                0)
          << r;
    }
  }
  std::printf("[ gpt-oss experts ] %s: max |diff| / max(1, |ref|) = %.3g\n",
              GetParam().name.c_str(), worst);
  EXPECT_LE(worst, 2e-6);
}

std::vector<GptOssCase> GptOssCases() {
  std::vector<GptOssCase> v;
  v.push_back({"f32", GptOssPreset()});
  FixtureSpec s = GptOssPreset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"bf16", s});
  s.expert_format = ExpertFormat::kMxfp4;
  v.push_back({"bf16_mxfp4", s});
  // Sizes that are not multiples of the loader's 64-element transpose tiles.
  s = GptOssPreset();
  s.hidden_size = 96;
  s.intermediate_size = 96;
  v.push_back({"f32_d96_i96", s});
  // Weights up to ±6: gate and up far beyond the limit 7, so both clamps bite.
  s = GptOssPreset();
  s.mxfp4_scale_exponent = 127;
  v.push_back({"f32_clamped", s});
  s.swiglu_limit = 2.0;
  s.expert_format = ExpertFormat::kMxfp4;
  v.push_back({"mxfp4_limit2", s});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GptOssExpertTest, ::testing::ValuesIn(GptOssCases()),
                         [](const auto& p) { return p.param.name; });

// ---------------------------------------------------------------------------------------
// MXFP4 unpacking.

TEST(MoeWeights, Mxfp4UnpacksToTheDequantisedBf16TwinBitForBit) {
  FixtureSpec s = GptOssPreset();
  s.dtype = WeightDtype::kBf16;
  FixtureDir deq_dir("deq"), mx_dir("mxfp4");
  ASSERT_TRUE(WriteRandomCheckpoint(s, deq_dir.path()).ok());
  s.expert_format = ExpertFormat::kMxfp4;
  ASSERT_TRUE(WriteRandomCheckpoint(s, mx_dir.path()).ok());
  auto deq = LoadWeights(deq_dir.path());
  auto mx = LoadWeights(mx_dir.path());
  ASSERT_TRUE(deq != nullptr && mx != nullptr);
  EXPECT_FALSE(deq->config.moe.mxfp4);
  EXPECT_TRUE(mx->config.moe.mxfp4);
  EXPECT_TRUE(mx->weights.bf16_projections());
  const int d = s.hidden_size, ie = s.intermediate_size, n = s.num_experts;
  for (int layer = 0; layer < s.num_hidden_layers; ++layer) {
    const model::MoeLayerWeights& a = *deq->weights.layer(layer).moe;
    const model::MoeLayerWeights& b = *mx->weights.layer(layer).moe;
    ASSERT_EQ(static_cast<int>(b.experts.size()), n);
    for (int e = 0; e < n; ++e) {
      SCOPED_TRACE(::testing::Message() << "layer " << layer << " expert " << e);
      const auto& ea = a.experts[static_cast<size_t>(e)];
      const auto& eb = b.experts[static_cast<size_t>(e)];
      ASSERT_TRUE(ea.gate_up.bf16 != nullptr && eb.gate_up.bf16 != nullptr);
      ASSERT_TRUE(ea.down.bf16 != nullptr && eb.down.bf16 != nullptr);
      EXPECT_EQ(std::memcmp(ea.gate_up.bf16, eb.gate_up.bf16,
                            kernels::cpu::PackedLinearFloats(2 * ie, d) * 2),
                0);
      EXPECT_EQ(
          std::memcmp(ea.down.bf16, eb.down.bf16, kernels::cpu::PackedLinearFloats(d, ie) * 2), 0);
      EXPECT_EQ(std::memcmp(ea.gate_up_bias, eb.gate_up_bias, static_cast<size_t>(2 * ie) * 4), 0);
      EXPECT_EQ(std::memcmp(ea.down_bias, eb.down_bias, static_cast<size_t>(d) * 4), 0);
    }
  }
}

TEST(MoeWeights, Mxfp4ScalesPastTheBf16RangeAreRefusedNamingTheTensor) {
  FixtureSpec s = GptOssPreset();
  s.expert_format = ExpertFormat::kMxfp4;
  s.mxfp4_scale_exponent = 254;  // scales 253..255: 2^128 · 6 overflows, 255 is NaN in E8M0
  FixtureDir dir("overflow");
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  auto c = model::LoadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  auto w = LlamaWeights::Load(*c, std::move(*ckpt));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("mlp.experts.gate_up_proj_blocks"), std::string::npos)
      << w.status();
  EXPECT_NE(w.status().message().find("infinity"), std::string::npos) << w.status();
}

// The checkpoint map names every tensor of each fixture exactly once (every preset kvserve's
// config accepts): nothing in a checkpoint is silently ignored, MoE experts included.
TEST(MoeWeights, CheckpointMapNamesEveryFixtureTensorOnce) {
  int checked = 0;
  for (const auto& [name, spec] : AllPresets()) {
    SCOPED_TRACE(name);
    FixtureDir dir(name);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    auto c = model::LoadModelConfig(dir.path());
    if (!c.ok()) continue;  // e.g. partial rotary (Phi-4-mini): refused at start-up
    const model::CheckpointMap map = model::MapCheckpoint(*c);
    std::multiset<std::string> named;
    auto add = [&named](const model::WeightSpec& w) {
      named.insert(w.names.begin(), w.names.end());
      if (!w.fused.scales_name.empty()) named.insert(w.fused.scales_name);
    };
    add(map.embed);
    add(map.final_norm);
    if (!c->tie_word_embeddings) add(map.lm_head);
    std::set<std::string> fused;  // a fused gpt-oss tensor is named once per expert
    for (const model::LayerWeightSpecs& l : map.layers) {
      for (const model::WeightSpec* w :
           {&l.input_norm, &l.qkv, &l.qkv_bias, &l.q_norm, &l.k_norm, &l.o, &l.o_bias,
            &l.post_attn_norm, &l.pre_ff_norm, &l.post_ff_norm, &l.gate_up, &l.down, &l.sinks,
            &l.router, &l.router_bias}) {
        add(*w);
      }
      for (const model::ExpertWeightSpecs& e : l.experts) {
        for (const model::WeightSpec* w : {&e.gate_up, &e.down, &e.gate_up_bias, &e.down_bias}) {
          if (w->fused.layout == model::FusedLayout::kNone) {
            add(*w);
          } else {
            fused.insert(w->names.begin(), w->names.end());
            if (!w->fused.scales_name.empty()) fused.insert(w->fused.scales_name);
          }
        }
      }
    }
    named.insert(fused.begin(), fused.end());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    const std::vector<std::string> stored = ckpt->TensorNames();
    EXPECT_EQ(named, std::multiset<std::string>(stored.begin(), stored.end()));
    ++checked;
  }
  EXPECT_GE(checked, 12);  // all 13 presets but Phi-4-mini
}

// ---------------------------------------------------------------------------------------
// Routing.

TEST(MoeRouting, SoftmaxTopKRenormalisesAndBreaksTiesToTheLowerExpert) {
  model::MoeConfig m;
  m.num_experts = 4;
  m.top_k = 2;
  std::vector<float> z = {0.0f, 2.0f, 1.0f, 2.0f};
  int32_t ids[2];
  float w[2];
  model::RouteTokens(m, z.data(), 1, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  // Qwen3-MoE with norm_topk_prob false keeps the softmax probabilities.
  m.renormalize = false;
  z = {0.0f, 2.0f, 1.0f, 3.0f};
  model::RouteTokens(m, z.data(), 1, ids, w);
  const double sum = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(3.0);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(w[0], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / sum, 1e-6);
}

TEST(MoeRouting, TopKThenSoftmaxOverTheChosenLogits) {
  model::MoeConfig m;
  m.num_experts = 5;
  m.top_k = 3;
  m.routing = model::MoeRouting::kTopKSoftmax;
  std::vector<float> z = {1.0f, 3.0f, 2.0f, -4.0f, 2.0f};  // two rows' worth is tested below
  std::vector<float> two = z;
  two.insert(two.end(), {5.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  int32_t ids[6];
  float w[6];
  model::RouteTokens(m, two.data(), 2, ids, w);
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{1, 2, 4}));
  const double s = std::exp(3.0) + 2 * std::exp(2.0);
  EXPECT_NEAR(w[0], std::exp(3.0) / s, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / s, 1e-6);
  EXPECT_NEAR(w[2], std::exp(2.0) / s, 1e-6);
  EXPECT_EQ(std::vector<int32_t>(ids + 3, ids + 6),
            (std::vector<int32_t>{0, 1, 2}));  // ties: lower first
  EXPECT_NEAR(w[4], 1.0 / (std::exp(5.0) + 2.0), 1e-6);
}

// ---------------------------------------------------------------------------------------
// The model.

TEST(MoeModel, GreedyAloneEqualsGreedyInABatchBitForBit) {
  FixtureDir dir("mixtral");
  ASSERT_TRUE(WriteRandomCheckpoint(MixtralPreset(), dir.path()).ok());
  model::ModelOptions opts;
  opts.threads = 2;
  opts.max_tokens_per_step = 64;
  auto m = model::LlamaModel::Load(dir.path(), opts);
  ASSERT_TRUE(m.ok()) << m.status();
  const int vocab = 256;
  const std::vector<int32_t> prompt = TestIds(12, vocab, 1);
  constexpr int kSteps = 6;
  // Alone.
  std::vector<std::vector<float>> alone;
  {
    model::testing::PagedSession s(**m, 4, config::KvDtype::kFp32, 64);
    const int a = s.NewSequence();
    std::vector<float> logits = s.Step({{a, prompt}})[0];
    alone.push_back(logits);
    for (int i = 0; i < kSteps; ++i) {
      const int32_t next = model::testing::Argmax(logits.data() + logits.size() - vocab, vocab);
      logits = s.Step({{a, {next}}})[0];
      alone.push_back(logits);
    }
  }
  // Between two other sequences, prefilling and decoding in the same steps.
  model::testing::PagedSession s(**m, 4, config::KvDtype::kFp32, 64, 11);
  const int b = s.NewSequence(), a = s.NewSequence(), c = s.NewSequence();
  auto out = s.Step({{b, TestIds(17, vocab, 2)}, {a, prompt}, {c, TestIds(5, vocab, 3)}});
  std::vector<float> la = out[1], lb = out[0], lc = out[2];
  ASSERT_EQ(la.size(), alone[0].size());
  EXPECT_EQ(std::memcmp(la.data(), alone[0].data(), la.size() * sizeof(float)), 0) << "prefill";
  for (int i = 0; i < kSteps; ++i) {
    auto next = [&](const std::vector<float>& l) {
      return model::testing::Argmax(l.data() + l.size() - vocab, vocab);
    };
    out = s.Step({{b, {next(lb)}}, {a, {next(la)}}, {c, {next(lc)}}});
    lb = out[0], la = out[1], lc = out[2];
    ASSERT_EQ(la.size(), alone[static_cast<size_t>(i) + 1].size());
    EXPECT_EQ(
        std::memcmp(la.data(), alone[static_cast<size_t>(i) + 1].data(), la.size() * sizeof(float)),
        0)
        << "decode step " << i;
  }
}

// Every tensor of a fixture is a parameter: the checkpoint's element count is the total, and
// a step streams the active share (top_k of the experts) at batch 1.
TEST(MoeModel, ParameterCountsAndStreamedBytes) {
  FixtureSpec qwen_step = Qwen3MoePreset();  // layer 1 sparse only
  qwen_step.decoder_sparse_step = 2;
  qwen_step.mlp_only_layers = {};
  for (const auto& [name, spec] :
       std::vector<std::pair<std::string, FixtureSpec>>{{"mixtral", MixtralPreset()},
                                                        {"qwen3moe", Qwen3MoePreset()},
                                                        {"qwen3moe_step2", qwen_step},
                                                        {"gptoss", GptOssPreset()}}) {
    SCOPED_TRACE(name);
    FixtureDir dir(name);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    auto loaded = LoadWeights(dir.path());
    ASSERT_NE(loaded, nullptr);
    const ModelConfig& c = loaded->config;
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    int64_t elements = 0;
    for (const std::string& t : ckpt->TensorNames())
      elements += (*ckpt->Find(t)).second->num_elements();
    EXPECT_EQ(c.num_parameters(), elements);
    const int64_t experts_off = static_cast<int64_t>(c.moe.num_experts - c.moe.top_k) * 3 *
                                c.hidden_size * c.moe.intermediate_size;
    int64_t moe_layers = 0;
    for (int i = 0; i < c.num_layers; ++i) moe_layers += c.is_moe_layer(i);
    EXPECT_GT(moe_layers, 0);
    // The expert biases count in full either way (streamed_bytes' convention too).
    const int64_t bias_off = c.moe.expert_bias
                                 ? static_cast<int64_t>(c.moe.num_experts - c.moe.top_k) *
                                       (2 * c.moe.intermediate_size + c.hidden_size)
                                 : 0;
    EXPECT_EQ(c.num_parameters() - c.num_active_parameters(),
              moe_layers * (experts_off + bias_off));
    // f32 fixtures: 4 bytes a parameter, the embedding table excluded (one row is read), the
    // expert biases counted in full.
    const double want =
        4.0 * static_cast<double>(c.num_active_parameters() + moe_layers * bias_off -
                                  static_cast<int64_t>(c.vocab_size) * c.hidden_size);
    EXPECT_NEAR(static_cast<double>(loaded->weights.streamed_bytes()), want, want * 1e-3);
  }
}

// The sinks the attention adds to each head's softmax are the checkpoint's, bit for bit
// (KvserveAgreementTest.gpt_oss checks what they do).
TEST(MoeModel, GptOssSinksAreLoaded) {
  FixtureDir dir("gptoss");
  ASSERT_TRUE(WriteRandomCheckpoint(GptOssPreset(), dir.path()).ok());
  auto loaded = LoadWeights(dir.path());
  ASSERT_NE(loaded, nullptr);
  auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const int heads = loaded->config.num_heads;
  for (int layer = 0; layer < loaded->config.num_layers; ++layer) {
    const float* sinks = loaded->weights.layer(layer).sinks;
    ASSERT_NE(sinks, nullptr);
    std::vector<float> want(static_cast<size_t>(heads));
    const std::vector<int64_t> shape = {heads};
    ASSERT_TRUE(
        ckpt->LoadF32("model.layers." + std::to_string(layer) + ".self_attn.sinks", shape, want)
            .ok());
    EXPECT_EQ(std::memcmp(sinks, want.data(), want.size() * 4), 0);
  }
}

}  // namespace
}  // namespace kvserve::testing::hf
