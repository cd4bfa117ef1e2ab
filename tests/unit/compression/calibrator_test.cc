// The calibrator: the accumulator's means on hand-made rows, and CalibrateModel on the random
// fixture model, whose layer-0 pre-RoPE queries depend on the token alone (q = Wq rmsnorm(x)),
// so its layer-0 statistics can be recomputed from the weights without the forward pass.
#include "compression/calibrator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "model/llama_model.h"

namespace kvserve::compression {
namespace {

std::string FixtureDir() { return std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32"; }

TEST(QueryStatsAccumulator, AveragesComplexPairsAndMagnitudes) {
  // head_dim 4: pairs f0 = dims (0, 2), f1 = dims (1, 3); rows carry 2 junk floats after Q.
  QueryStatsAccumulator acc(2, 1, 4);
  const float rows[2][6] = {{1, 0, 0, 1, 99, 99}, {3, 0, 0, -1, 99, 99}};
  const float one[6] = {0, 2, 0, 0, 99, 99};
  acc.Add(0, &rows[0][0], 6, 2);
  acc.Add(1, one, 6, 1);
  EXPECT_EQ(acc.num_tokens(0), 2);
  const std::vector<float> inv = {1.0f, 0.01f};
  auto bad = acc.Finish(1, inv, "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << "layers saw 2 and 1 rows";
  acc.Add(1, one, 6, 1);
  auto s = acc.Finish(1, inv, "unit");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_tokens, 2);
  EXPECT_EQ(s->source, "unit");
  EXPECT_DOUBLE_EQ(s->at(0, 0, 0).a_re, 2.0);  // (1 + 3) / 2
  EXPECT_DOUBLE_EQ(s->at(0, 0, 0).a_im, 0.0);
  EXPECT_DOUBLE_EQ(s->at(0, 0, 0).m, 2.0);
  EXPECT_DOUBLE_EQ(s->at(0, 0, 1).a_re, 0.0);
  EXPECT_DOUBLE_EQ(s->at(0, 0, 1).a_im, 0.0);    // (1 - 1) / 2
  EXPECT_DOUBLE_EQ(s->at(0, 0, 1).m, 1.0);       // |i| and |-i|
  EXPECT_DOUBLE_EQ(s->at(1, 0, 1).a_re, 2.0);
  EXPECT_EQ(s->inv_freq, (std::vector<double>{1.0, static_cast<double>(0.01f)}));

  QueryStatsAccumulator empty(1, 1, 2);
  EXPECT_FALSE(empty.Finish(1, std::vector<float>{1.0f}, "").ok());
}

class CalibrateFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    model::ModelOptions o;
    o.threads = 1;
    o.max_tokens_per_step = 64;  // windows of 128 run in two chunks
    auto m = model::LlamaModel::Load(FixtureDir(), o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> tok(3, model_->config().vocab_size - 1);
    tokens_.resize(600);
    for (auto& t : tokens_) t = tok(rng);
  }
  std::unique_ptr<model::LlamaModel> model_;
  std::vector<int32_t> tokens_;
};

TEST_F(CalibrateFixture, LayerZeroMatchesStatisticsRecomputedFromTheWeights) {
  CalibrationOptions o;
  o.max_tokens = 600;
  o.window = 128;
  o.bos = 1;
  auto s = CalibrateModel(*model_, tokens_, o);
  ASSERT_TRUE(s.ok()) << s.status();
  const model::ModelConfig& c = model_->config();
  // 600 text tokens in windows of BOS + 127: 5 windows, 605 query rows per layer.
  EXPECT_EQ(s->num_tokens, 605);
  EXPECT_TRUE(CheckCompatible(*s, c, model_->rope_inv_freq()).ok());

  std::vector<int32_t> rows(tokens_);
  for (int w = 0; w < 5; ++w) rows.push_back(1);
  const int d = c.hidden_size, hd = c.head_dim, F = hd / 2;
  // Layer 0's weights as the checkpoint stores them (row-major fp32).
  const model::LayerWeightSpecs& spec = model_->weights().map().layers[0];
  const model::SafetensorsCheckpoint& ckpt = model_->weights().checkpoint();
  auto read = [&](const model::WeightSpec& s) {
    std::vector<float> v(static_cast<size_t>(s.elements()));
    EXPECT_TRUE(model::ReadF32(ckpt, s, v).ok()) << s.names.front();
    return v;
  };
  const std::vector<float> embed = read(model_->weights().map().embed), qkv = read(spec.qkv),
                           input_norm = read(spec.input_norm);
  const std::vector<float> qkv_bias = spec.qkv_bias.present() ? read(spec.qkv_bias) : std::vector<float>();
  struct {
    const float *qkv, *qkv_bias, *input_norm;
  } lw{qkv.data(), qkv_bias.empty() ? nullptr : qkv_bias.data(), input_norm.data()};
  std::vector<double> sum(static_cast<size_t>(c.num_heads) * F * 3, 0.0);
  for (int32_t t : rows) {
    const float* x = embed.data() + static_cast<int64_t>(t) * d;
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv_rms = 1.0 / std::sqrt(ss / d + c.rms_norm_eps);
    std::vector<double> q(static_cast<size_t>(c.q_size()));
    for (int r = 0; r < c.q_size(); ++r) {
      double acc = lw.qkv_bias != nullptr ? lw.qkv_bias[r] : 0.0;
      for (int i = 0; i < d; ++i) acc += static_cast<double>(lw.qkv[static_cast<int64_t>(r) * d + i]) * x[i] * inv_rms * lw.input_norm[i];
      q[r] = acc;
    }
    for (int h = 0; h < c.num_heads; ++h)
      for (int f = 0; f < F; ++f) {
        const double re = q[h * hd + f], im = q[h * hd + f + F];
        sum[(h * F + f) * 3] += re;
        sum[(h * F + f) * 3 + 1] += im;
        sum[(h * F + f) * 3 + 2] += std::hypot(re, im);
      }
  }
  for (int h = 0; h < c.num_heads; ++h)
    for (int f = 0; f < F; ++f) {
      const FreqStat& e = s->at(0, h, f);
      const double n = static_cast<double>(rows.size());
      EXPECT_NEAR(e.a_re, sum[(h * F + f) * 3] / n, 1e-5 * (1 + std::abs(e.a_re))) << h << " " << f;
      EXPECT_NEAR(e.a_im, sum[(h * F + f) * 3 + 1] / n, 1e-5 * (1 + std::abs(e.a_im))) << h << " " << f;
      EXPECT_NEAR(e.m, sum[(h * F + f) * 3 + 2] / n, 1e-5 * (1 + e.m)) << h << " " << f;
      EXPECT_GE(e.m + 1e-12, std::hypot(e.a_re, e.a_im)) << "mean magnitude >= magnitude of the mean";
    }
  // Deeper layers see context, and every layer's statistics are well-formed.
  for (int l = 1; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h)
      for (int f = 0; f < F; ++f) EXPECT_GE(s->at(l, h, f).m + 1e-12, std::hypot(s->at(l, h, f).a_re, s->at(l, h, f).a_im));

  // Deterministic.
  auto again = CalibrateModel(*model_, tokens_, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(SerializeStats(*again), SerializeStats(*s));
}

TEST_F(CalibrateFixture, RefusesTextShorterThanRequested) {
  CalibrationOptions o;  // default: 32768 tokens
  auto s = CalibrateModel(*model_, tokens_, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "600 tokens, fewer than the 32768")) << s.status();
}

}  // namespace
}  // namespace kvserve::compression
