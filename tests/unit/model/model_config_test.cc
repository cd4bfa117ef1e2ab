#include "model/model_config.h"

#include <cmath>
#include <numbers>

#include "gtest/gtest.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::model {
namespace {

using testing::FixtureDir;

std::string Minimal(const std::string& extra = "", const std::string& arch = "LlamaForCausalLM") {
  return R"({"architectures": [")" + arch +
         R"("], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 100)" +
         extra + "}";
}

void ExpectError(const std::string& json, const std::string& needle) {
  auto c = ParseModelConfig(json, "cfg.json");
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("cfg.json"), std::string::npos) << c.status();
}

TEST(ModelConfig, DefaultsFollowHuggingFace) {
  auto c = ParseModelConfig(Minimal(), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->num_kv_heads, 4);  // = heads
  EXPECT_EQ(c->head_dim, 16);     // hidden / heads
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScalingKind::kNone);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->sliding_window.has_value());
  EXPECT_EQ(c->max_position_embeddings, 2048);
}

TEST(ModelConfig, FixturesParse) {
  auto llama = LoadModelConfig(FixtureDir("llama_f32"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->num_kv_heads, 2);
  EXPECT_EQ(llama->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(llama->bos_token_id, 1);

  auto qwen = LoadModelConfig(FixtureDir("qwen2_bf16"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->architecture, Architecture::kQwen2);
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_FALSE(qwen->o_bias);
  EXPECT_TRUE(qwen->tie_word_embeddings);
  EXPECT_EQ(qwen->rope_scaling.kind, RopeScalingKind::kLinear);
  EXPECT_FALSE(qwen->sliding_window.has_value());  // use_sliding_window: false

  auto l3 = LoadModelConfig(FixtureDir("llama3_f16"));
  ASSERT_TRUE(l3.ok()) << l3.status();
  EXPECT_EQ(l3->head_dim, 32);
  EXPECT_EQ(l3->q_size(), 128);
  EXPECT_TRUE(l3->qkv_bias);
  EXPECT_TRUE(l3->o_bias);
  EXPECT_EQ(l3->rope_scaling.kind, RopeScalingKind::kLlama3);
  EXPECT_EQ(l3->eos_token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(ModelConfig, MistralAndQwenSlidingWindowCapsTheExactContext) {
  auto m = ParseModelConfig(Minimal(R"(, "sliding_window": 512, "max_position_embeddings": 4096)",
                                    "MistralForCausalLM"),
                            "cfg.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->architecture, Architecture::kMistral);
  EXPECT_EQ(m->max_context(), 512);
  auto q = ParseModelConfig(Minimal(R"(, "sliding_window": 512, "use_sliding_window": true)", "Qwen2ForCausalLM"),
                            "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->max_context(), 512);
  auto mnull = ParseModelConfig(Minimal(R"(, "sliding_window": null)", "MistralForCausalLM"), "cfg.json");
  ASSERT_TRUE(mnull.ok());
  EXPECT_FALSE(mnull->sliding_window.has_value());
}

TEST(ModelConfig, RopeInvFreqPlainAndLinear) {
  auto c = ParseModelConfig(Minimal(R"(, "rope_theta": 500000.0)"), "cfg.json");
  ASSERT_TRUE(c.ok());
  auto inv = RopeInvFreq(*c);
  ASSERT_EQ(inv.size(), 8u);
  for (int f = 0; f < 8; ++f) EXPECT_FLOAT_EQ(inv[f], static_cast<float>(std::pow(500000.0, -2.0 * f / 16)));
  auto lin = ParseModelConfig(Minimal(R"(, "rope_scaling": {"type": "linear", "factor": 4.0})"), "cfg.json");
  ASSERT_TRUE(lin.ok()) << lin.status();
  auto inv_lin = RopeInvFreq(*lin);
  for (int f = 0; f < 8; ++f) EXPECT_FLOAT_EQ(inv_lin[f], static_cast<float>(std::pow(10000.0, -2.0 * f / 16) / 4));
}

TEST(ModelConfig, RopeInvFreqLlama3Bands) {
  // Llama 3.1 settings, head_dim 128: high frequencies kept, low ones divided by 8, a
  // smooth band between.
  auto c = ParseModelConfig(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
          "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
          "vocab_size": 128256, "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
          "eos_token_id": [128001, 128008, 128009]})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  auto inv = RopeInvFreq(*c);
  ASSERT_EQ(inv.size(), 64u);
  int kept = 0, scaled = 0, blended = 0;
  for (int f = 0; f < 64; ++f) {
    const double base = std::pow(500000.0, -2.0 * f / 128);
    const double wavelen = 2 * std::numbers::pi / base;
    if (wavelen < 8192.0 / 4) {
      EXPECT_FLOAT_EQ(inv[f], static_cast<float>(base));
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(inv[f], static_cast<float>(base / 8));
      ++scaled;
    } else {
      EXPECT_LT(inv[f], base);
      EXPECT_GT(inv[f], base / 8);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(blended, 0);
  // Known value from the reference formula: frequency index 31 (in the blended band).
  const double base31 = std::pow(500000.0, -62.0 / 128);
  const double smooth = (8192.0 / (2 * std::numbers::pi / base31) - 1.0) / 3.0;
  ASSERT_GT(smooth, 0.0);
  ASSERT_LT(smooth, 1.0);
  EXPECT_FLOAT_EQ(inv[31], static_cast<float>((1 - smooth) * base31 / 8 + smooth * base31));
}

TEST(ModelConfig, ClearErrors) {
  ExpectError(Minimal("", "GPT2LMHeadModel"), "unsupported architecture \"GPT2LMHeadModel\"");
  ExpectError(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})", "intermediate_size: missing");
  ExpectError(Minimal(R"(, "num_key_value_heads": 3)"), "does not divide");
  ExpectError(Minimal(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})"), "unsupported rope type \"yarn\"");
  ExpectError(Minimal(R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})"), "unsupported rope type \"dynamic\"");
  ExpectError(Minimal(R"(, "hidden_act": "gelu")"), "hidden_act");
  ExpectError(Minimal(R"(, "head_dim": 15)"), "head_dim");
  ExpectError(Minimal(R"(, "hidden_size": "big")"), "hidden_size: expected an integer");
  ExpectError(Minimal(R"(, "eos_token_id": 100)"), "eos_token_id");
  ExpectError(Minimal(R"(, "mlp_bias": true)"), "mlp_bias");
  ExpectError("{not json", "not valid JSON");
  auto missing = LoadModelConfig("/nonexistent/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelConfig, DefaultRopeTypeMeansNone) {
  auto c = ParseModelConfig(Minimal(R"(, "rope_scaling": {"rope_type": "default"})"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.kind, RopeScalingKind::kNone);
}

}  // namespace
}  // namespace kvserve::model
