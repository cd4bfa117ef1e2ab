#include "model/model_config.h"
#include "model/rope_table.h"

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

TEST(ModelConfig, MistralAndQwenSlidingWindowsPerLayer) {
  auto m = ParseModelConfig(Minimal(R"(, "sliding_window": 512, "max_position_embeddings": 4096)",
                                    "MistralForCausalLM"),
                            "cfg.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->architecture, Architecture::kMistral);
  EXPECT_EQ(m->max_context(), 4096);  // the window is masked, not a cap on the context
  EXPECT_EQ(m->layer_window, (std::vector<int32_t>{512, 512}));
  // Qwen2/3 window only the layers from max_window_layers on (Hugging Face's default 28
  // leaves this 2-layer model unwindowed).
  auto q = ParseModelConfig(Minimal(R"(, "sliding_window": 512, "use_sliding_window": true)", "Qwen2ForCausalLM"),
                            "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->layer_window, (std::vector<int32_t>{0, 0}));
  EXPECT_FALSE(q->sliding_window.has_value());
  auto q1 = ParseModelConfig(
      Minimal(R"(, "sliding_window": 512, "use_sliding_window": true, "max_window_layers": 1)", "Qwen3ForCausalLM"),
      "cfg.json");
  ASSERT_TRUE(q1.ok()) << q1.status();
  EXPECT_EQ(q1->layer_window, (std::vector<int32_t>{0, 512}));
  EXPECT_EQ(q1->max_context(), 32768);
  // layer_types, where given, decides.
  auto lt = ParseModelConfig(
      Minimal(R"(, "sliding_window": 64, "layer_types": ["full_attention", "sliding_attention"])", "MistralForCausalLM"),
      "cfg.json");
  ASSERT_TRUE(lt.ok()) << lt.status();
  EXPECT_EQ(lt->layer_window, (std::vector<int32_t>{0, 64}));
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
  ExpectError(Minimal(R"(, "rope_scaling": {"rope_type": "mrope", "factor": 4.0})"), "unsupported rope type \"mrope\"");
  ExpectError(Minimal(R"(, "rope_scaling": {"type": "yarn", "factor": 0.5})"), "rope_scaling.factor: must be >= 1");
  ExpectError(Minimal(R"(, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0]})"), "long_factor");
  ExpectError(Minimal(R"(, "partial_rotary_factor": 1.5)"), "partial_rotary_factor");
  ExpectError(Minimal(R"(, "layer_types": ["full_attention", "chunked_attention"], "sliding_window": 8)", "MistralForCausalLM"),
              "chunked_attention");
  ExpectError(Minimal(R"(, "hidden_act": "gelu")"), "hidden_act");
  ExpectError(Minimal(R"(, "head_dim": 15)"), "head_dim");
  ExpectError(Minimal(R"(, "hidden_size": "big")"), "hidden_size: expected an integer");
  ExpectError(Minimal(R"(, "eos_token_id": 100)"), "eos_token_id");
  ExpectError(Minimal(R"(, "mlp_bias": true)"), "mlp_bias");
  ExpectError("{not json", "not valid JSON");
  auto missing = LoadModelConfig("/nonexistent/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelConfig, GemmaLayerPatternsAndFields) {
  const std::string six_layers = R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 100, "sliding_window": 8, "query_pre_attn_scalar": 20,
      "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0})";
  auto g3 = ParseModelConfig(six_layers, "cfg.json");
  ASSERT_TRUE(g3.ok()) << g3.status();
  EXPECT_EQ(g3->layer_window, (std::vector<int32_t>{8, 8, 8, 8, 8, 0, 8}));  // 5 local : 1 global
  EXPECT_TRUE(g3->qk_norm);
  EXPECT_TRUE(g3->sandwich_norms);
  EXPECT_TRUE(g3->tie_word_embeddings);  // Gemma's default
  EXPECT_EQ(g3->activation, Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(g3->attention_scale, 1.0 / std::sqrt(20.0));
  EXPECT_EQ(g3->attn_logit_softcap, 0.0);
  ASSERT_TRUE(g3->rope_local_theta.has_value());
  EXPECT_EQ(*g3->rope_local_theta, 10000.0);
  auto g2 = ParseModelConfig(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100,
      "sliding_window": 16})",
                             "cfg.json");
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(g2->head_dim, 256);  // Gemma2Config's default, not hidden / heads
  EXPECT_EQ(g2->layer_window, (std::vector<int32_t>{16, 0, 16, 0}));
  EXPECT_EQ(g2->attn_logit_softcap, 50.0);
  EXPECT_EQ(g2->final_logit_softcap, 30.0);
  EXPECT_FALSE(g2->qk_norm);
}

TEST(ModelConfig, YarnFrequenciesAndAttentionFactor) {
  // Interpolated below the correction range, extrapolated above, a ramp between; the
  // attention factor 0.1 ln(s) + 1 (YaRN, eq. 22) when not given.
  auto c = ParseModelConfig(Minimal(R"(, "rope_theta": 10000.0, "max_position_embeddings": 8192,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048})"),
                            "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const RopeTable t = ComputeRopeTable(*c, c->rope_theta, true);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  EXPECT_FLOAT_EQ(t.attention_factor, static_cast<float>(0.1 * std::log(4.0) + 1.0));
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);  // fastest frequency kept
  const double slowest = std::pow(10000.0, -14.0 / 16);
  EXPECT_FLOAT_EQ(t.inv_freq[7], static_cast<float>(slowest / 4));  // slowest interpolated
  const RopeTable local = ComputeRopeTable(*c, c->rope_theta, false);
  EXPECT_FLOAT_EQ(local.attention_factor, 1.0f);
  EXPECT_FLOAT_EQ(local.inv_freq[7], static_cast<float>(slowest));
  auto given = ParseModelConfig(Minimal(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "attention_factor": 1.5})"),
                                "cfg.json");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_FLOAT_EQ(ComputeRopeTable(*given, given->rope_theta, true).attention_factor, 1.5f);
}

TEST(ModelConfig, DynamicAndLongRopeAreFixedForTheServedContext) {
  // dynamic: the base Hugging Face uses at the longest served sequence (factor x context).
  auto d = ParseModelConfig(Minimal(R"(, "max_position_embeddings": 1024,
      "rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                            "cfg.json");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->served_context, 2048);
  const double base = 10000.0 * std::pow(2.0 * 2048 / 1024 - 1.0, 16.0 / 14.0);
  EXPECT_FLOAT_EQ(RopeInvFreq(*d)[1], static_cast<float>(std::pow(base, -2.0 / 16)));
  ModelConfig short_ctx = *d;
  short_ctx.served_context = 1024;  // within the original context: plain RoPE, as Hugging Face
  EXPECT_FLOAT_EQ(RopeInvFreq(short_ctx)[1], static_cast<float>(std::pow(10000.0, -2.0 / 16)));
  // longrope: long factors past the original context, short ones within it.
  const std::string phi = R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 4096,
      "original_max_position_embeddings": 1024, "rope_scaling": {"type": "longrope",
      "short_factor": [1, 1, 1, 1, 1, 1, 1, 2], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}})";
  auto p = ParseModelConfig(phi, "cfg.json");
  ASSERT_TRUE(p.ok()) << p.status();
  const RopeTable lt = ComputeRopeTable(*p, p->rope_theta, true);
  EXPECT_FLOAT_EQ(lt.inv_freq[7], static_cast<float>(std::pow(10000.0, -14.0 / 16) / 8));
  EXPECT_FLOAT_EQ(lt.attention_factor, static_cast<float>(std::sqrt(1 + std::log(4.0) / std::log(1024.0))));
  ModelConfig within = *p;
  within.served_context = 1024;
  EXPECT_FLOAT_EQ(ComputeRopeTable(within, within.rope_theta, true).inv_freq[7],
                  static_cast<float>(std::pow(10000.0, -14.0 / 16) / 2));
}

TEST(ModelConfig, DefaultRopeTypeMeansNone) {
  auto c = ParseModelConfig(Minimal(R"(, "rope_scaling": {"rope_type": "default"})"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.kind, RopeScalingKind::kNone);
}

TEST(ModelConfig, MixtureOfExpertsFields) {
  // Mixtral: every layer sparse, softmax then top-k, always renormalised; Mistral's window.
  auto mx = ParseModelConfig(
      Minimal(R"(, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null)",
              "MixtralForCausalLM"),
      "cfg.json");
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->architecture, Architecture::kMixtral);
  EXPECT_EQ(mx->moe.num_experts, 8);
  EXPECT_EQ(mx->moe.top_k, 2);
  EXPECT_EQ(mx->moe.intermediate_size, 128);
  EXPECT_EQ(mx->moe.routing, MoeRouting::kSoftmaxTopK);
  EXPECT_TRUE(mx->moe.renormalize);
  EXPECT_FALSE(mx->moe.router_bias || mx->moe.expert_bias || mx->qkv_bias || mx->attention_sinks);
  EXPECT_EQ(mx->layer_moe, (std::vector<uint8_t>{1, 1}));
  EXPECT_FALSE(mx->any_dense_layer());
  EXPECT_FALSE(mx->sliding_window.has_value());
  auto mw = ParseModelConfig(Minimal(R"(, "sliding_window": 4096)", "MixtralForCausalLM"), "cfg.json");
  ASSERT_TRUE(mw.ok()) << mw.status();
  EXPECT_EQ(mw->layer_window, (std::vector<int32_t>{4096, 4096}));  // Mistral's rule: every layer
  EXPECT_EQ(mw->moe.num_experts, 8);                                 // MixtralConfig's defaults
  EXPECT_EQ(mw->moe.top_k, 2);
  // 2 layers x (attention 4 D^2 + 2 norms + router 8 D + 8 experts x 3 D I) + final norm + embed +
  // head.
  const int64_t d = 64, i = 128, v = 100;
  const int64_t attn = 4 * d * d + 2 * d;
  EXPECT_EQ(mx->num_parameters(), 2 * (attn + 8 * d + 8 * 3 * d * i) + d + 2 * v * d);
  EXPECT_EQ(mx->num_active_parameters(), 2 * (attn + 8 * d + 2 * 3 * d * i) + d + 2 * v * d);

  // Qwen3-MoE: Hugging Face's defaults (norm_topk_prob false), moe_intermediate_size for the
  // experts, dense layers from mlp_only_layers and decoder_sparse_step.
  const std::string qwen = R"(, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "num_hidden_layers": 4)";
  auto q = ParseModelConfig(Minimal(qwen + R"(, "mlp_only_layers": [0])", "Qwen3MoeForCausalLM"),
                            "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->qk_norm);
  EXPECT_FALSE(q->moe.renormalize);
  EXPECT_EQ(q->moe.intermediate_size, 32);
  EXPECT_EQ(q->intermediate_size, 128);
  EXPECT_EQ(q->layer_moe, (std::vector<uint8_t>{0, 1, 1, 1}));
  q = ParseModelConfig(Minimal(qwen + R"(, "decoder_sparse_step": 2, "norm_topk_prob": true)",
                               "Qwen3MoeForCausalLM"),
                       "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->moe.renormalize);
  EXPECT_EQ(q->layer_moe, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_TRUE(q->any_dense_layer() && q->any_moe_layer());
  q = ParseModelConfig(Minimal(R"(, "num_experts": 0)", "Qwen3MoeForCausalLM"), "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->any_moe_layer());  // no experts: every layer dense, as in Hugging Face

  // gpt-oss: biases everywhere, sinks, top-k then softmax, clamped SwiGLU, even layers slide
  // (window 128 by default), MXFP4 experts from quantization_config.
  const std::string oss =
      R"(, "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2,
      "num_hidden_layers": 4, "swiglu_limit": 7.0, "head_dim": 16)";
  auto g = ParseModelConfig(
      Minimal(oss + R"(, "quantization_config": {"quant_method": "mxfp4"})", "GptOssForCausalLM"),
      "cfg.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->qkv_bias && g->o_bias && g->attention_sinks);
  EXPECT_EQ(g->moe.routing, MoeRouting::kTopKSoftmax);
  EXPECT_TRUE(g->moe.router_bias && g->moe.expert_bias && g->moe.mxfp4);
  EXPECT_EQ(g->moe.activation, ExpertActivation::kClampedSwiglu);
  EXPECT_EQ(g->moe.swiglu_limit, 7.0);
  EXPECT_EQ(g->layer_window, (std::vector<int32_t>{128, 0, 128, 0}));
  EXPECT_EQ(g->layer_moe, (std::vector<uint8_t>{1, 1, 1, 1}));
  const int64_t gattn = 4 * d * d + 2 * d + (64 + 64 + 64 + 64) + 4;  // + q/k/v/o biases + 4 sinks
  const int64_t gexp = 3 * d * i + 2 * i + d;
  EXPECT_EQ(g->num_parameters(), 4 * (gattn + 4 * d + 4 + 4 * gexp) + d + 2 * v * d);
  EXPECT_EQ(g->num_active_parameters(), 4 * (gattn + 4 * d + 4 + 2 * gexp) + d + 2 * v * d);
}

TEST(ModelConfig, MixtureOfExpertsErrors) {
  ExpectError(
      Minimal(R"(, "num_local_experts": 2, "num_experts_per_tok": 3)", "MixtralForCausalLM"),
      "num_experts_per_tok: 3 exceeds the 2 experts");
  ExpectError(
      Minimal(R"(, "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 4)",
              "GptOssForCausalLM"),
      "experts_per_token");
  ExpectError(Minimal(R"(, "mlp_only_layers": [0, "one"])", "Qwen3MoeForCausalLM"),
              "mlp_only_layers");
  ExpectError(Minimal(R"(, "swiglu_limit": 0)", "GptOssForCausalLM"), "swiglu_limit");
  // Quantized checkpoints: unsupported variants are refused by name (more in
  // tests/unit/hf_models/hf_quant_refusal_test.cc); MXFP4 is gpt-oss's alone.
  ExpectError(Minimal(R"(, "quantization_config": {"quant_method": "gptq", "bits": 3})"),
              "GPTQ with 3 bits is not supported");
  ExpectError(Minimal(R"(, "quantization_config": {"quant_method": "mxfp4"})"),
              "only supported for gpt-oss");
  ExpectError(Minimal(R"(, "quantization_config": {"quant_method": "awq"})", "GptOssForCausalLM"),
              "awq");
  ExpectError(
      Minimal(
          R"(, "hidden_size": 48, "head_dim": 12, "quantization_config": {"quant_method": "mxfp4"})",
          "GptOssForCausalLM"),
      "divisible by 32");
}

// The published configs of three released models give their published sizes (model cards:
// Mixtral-8x7B 46.7 B total / 12.9 B active; Qwen3-30B-A3B 30.5 B / 3.3 B; gpt-oss-20b 20.91 B
// total, 3.61 B active counting the unembedding but not the embedding table).
TEST(ModelConfig, ReleasedMoeConfigsGiveTheirPublishedParameterCounts) {
  auto mixtral = ParseModelConfig(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0,
      "max_position_embeddings": 32768, "sliding_window": null, "rms_norm_eps": 1e-05})",
                                  "mixtral.json");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_NEAR(mixtral->num_parameters() * 1e-9, 46.7, 0.05);
  EXPECT_NEAR(mixtral->num_active_parameters() * 1e-9, 12.9, 0.05);

  auto qwen = ParseModelConfig(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
      "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": false,
      "use_sliding_window": false, "sliding_window": null, "max_window_layers": 48})",
                               "qwen3moe.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_NEAR(qwen->num_parameters() * 1e-9, 30.5, 0.05);
  EXPECT_NEAR(qwen->num_active_parameters() * 1e-9, 3.3, 0.06);  // 3.35: "3.3 B" as published

  auto oss = ParseModelConfig(R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true,
      "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
      "initial_context_length": 4096, "intermediate_size": 2880, "max_position_embeddings": 131072,
      "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
      "num_local_experts": 32, "quantization_config": {"quant_method": "mxfp4"}, "rms_norm_eps": 1e-05,
      "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
      "rope_type": "yarn", "truncate": false}, "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0,
      "tie_word_embeddings": false, "vocab_size": 201088, "eos_token_id": 200002, "pad_token_id": 199999})",
                              "gpt-oss-20b.json");
  ASSERT_TRUE(oss.ok()) << oss.status();
  EXPECT_NEAR(oss->num_parameters() * 1e-9, 20.91, 0.01);
  const double embedding = static_cast<double>(oss->vocab_size) * oss->hidden_size;
  EXPECT_NEAR((static_cast<double>(oss->num_active_parameters()) - embedding) * 1e-9, 3.61, 0.01);
  EXPECT_EQ(oss->layer_window[0], 128);
  EXPECT_EQ(oss->layer_window[1], 0);
  EXPECT_EQ(oss->rope_scaling.kind, RopeScalingKind::kYarn);
  EXPECT_FALSE(oss->rope_scaling.truncate);
}

}  // namespace
}  // namespace kvserve::model
