// The fixture writer: config.json carries each architecture's real names and fields, the
// safetensors files the tensor names and shapes transformers saves (single file or two
// shards with a valid index), BF16 is round-to-nearest-even of the fp32 draws, and the
// output is a pure function of the spec.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_config.h"
#include "tests/support/hf_models/safetensors_writer.h"
#include "tests/unit/hf_models/hf_test_util.h"

namespace kvserve::testing::hf {
namespace {

using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::vector<int64_t> ShapeOf(const model::SafetensorsCheckpoint& ckpt, const std::string& name) {
  auto f = ckpt.Find(name);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? f->second->shape : std::vector<int64_t>{};
}

TEST(HfFixture, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Bf16FromF32(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(Bf16FromF32(1.0f + 0x1.0p-8f), 0x3F80);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(Bf16FromF32(1.0f + 0x3.0p-8f), 0x3F82);
  EXPECT_EQ(Bf16FromF32(1.0f + 0x1.2p-8f), 0x3F81);  // above the tie: rounds up
  EXPECT_EQ(F32FromBf16(0xC000), -2.0f);
}

TEST(HfFixture, LlamaConfigAndTensorsAsHfSavesThem) {
  FixtureDir dir("llama_names");
  FixtureSpec s = LlamaPreset();
  s.attention_bias = true;
  s.rope_scaling = Llama3Rope(8.0, 64);
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  const json c = ReadJson(dir.path() + "/config.json");
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["model_type"], "llama");
  for (const char* k :
       {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta",
        "max_position_embeddings", "tie_word_embeddings", "attention_bias", "hidden_act"}) {
    EXPECT_TRUE(c.contains(k)) << k;
  }
  EXPECT_EQ(c["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(c["rope_scaling"]["original_max_position_embeddings"], 64);
  auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ShapeOf(*ckpt, "model.embed_tokens.weight"), (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(ShapeOf(*ckpt, "model.layers.1.self_attn.q_proj.weight"),
            (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(ShapeOf(*ckpt, "model.layers.1.self_attn.k_proj.weight"),
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(ShapeOf(*ckpt, "model.layers.1.self_attn.o_proj.bias"), (std::vector<int64_t>{64}));
  EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(ShapeOf(*ckpt, "lm_head.weight"), (std::vector<int64_t>{256, 64}));
  // 2 layers × (2 norms + 4 projections + 4 biases + 3 MLP) + embed + norm + lm_head.
  EXPECT_EQ(ckpt->TensorNames().size(), 2u * 13u + 3u);
}

TEST(HfFixture, EveryPresetParsesAndNamesItsArchitecture) {
  for (const auto& [name, spec] : AllPresets()) {
    SCOPED_TRACE(name);
    FixtureDir dir("preset_" + name);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    const json c = ReadJson(dir.path() + "/config.json");
    EXPECT_EQ(c["architectures"][0], ArchitectureName(spec.arch));
    EXPECT_EQ(c["model_type"], ModelType(spec.arch));
    auto rc = LoadReferenceConfig(dir.path());
    ASSERT_TRUE(rc.ok()) << rc.status();
    EXPECT_EQ(rc->num_layers, spec.num_hidden_layers);
    EXPECT_EQ(rc->head_dim, spec.head_dim);
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->Contains("lm_head.weight"), !spec.tie_word_embeddings);
  }
}

TEST(HfFixture, ShardedIndexIsValidAndHoldsTheSameTensors) {
  FixtureDir one("shard1"), two("shard2");
  FixtureSpec s = Qwen2Preset();
  ASSERT_TRUE(WriteRandomCheckpoint(s, one.path()).ok());
  s.num_shards = 2;
  ASSERT_TRUE(WriteRandomCheckpoint(s, two.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(two.path() + "/model.safetensors"));
  const json idx = ReadJson(two.path() + "/model.safetensors.index.json");
  std::set<std::string> files;
  for (const auto& [k, v] : idx["weight_map"].items()) files.insert(v.get<std::string>());
  EXPECT_EQ(files, (std::set<std::string>{"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"}));
  auto a = model::SafetensorsCheckpoint::Open(one.path());
  auto b = model::SafetensorsCheckpoint::Open(two.path());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->TensorNames(), b->TensorNames());
  uint64_t total = 0;
  for (const std::string& n : b->TensorNames()) {
    auto fa = a->Find(n);
    auto fb = b->Find(n);
    ASSERT_TRUE(fa.ok() && fb.ok());
    const auto ba = fa->first->Bytes(*fa->second), bb = fb->first->Bytes(*fb->second);
    ASSERT_EQ(ba.size(), bb.size());
    EXPECT_EQ(std::memcmp(ba.data(), bb.data(), ba.size()), 0) << n;
    total += bb.size();
  }
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(ShapeOf(*b, "model.layers.0.self_attn.q_proj.bias"), (std::vector<int64_t>{64}));
}

TEST(HfFixture, Bf16TensorsAreTheRoundedF32Draws) {
  FixtureDir f32("f32"), bf16("bf16");
  FixtureSpec s = MistralPreset(0);
  ASSERT_TRUE(WriteRandomCheckpoint(s, f32.path()).ok());
  s.dtype = WeightDtype::kBf16;
  ASSERT_TRUE(WriteRandomCheckpoint(s, bf16.path()).ok());
  auto a = model::SafetensorsCheckpoint::Open(f32.path());
  auto b = model::SafetensorsCheckpoint::Open(bf16.path());
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  auto fa = a->Find(name);
  auto fb = b->Find(name);
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ(fb->second->dtype, "BF16");
  std::vector<float> va(static_cast<size_t>(fa->second->num_elements())), vb(va.size());
  ASSERT_TRUE(fa->first->ReadF32(*fa->second, va).ok());
  ASSERT_TRUE(fb->first->ReadF32(*fb->second, vb).ok());
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(F32FromBf16(Bf16FromF32(va[i])), vb[i]) << i;
  EXPECT_EQ(ReadJson(bf16.path() + "/config.json")["torch_dtype"], "bfloat16");
}

TEST(HfFixture, SameSpecSameBytesAndSeedChangesThem) {
  FixtureDir a("det_a"), b("det_b"), c("det_c");
  FixtureSpec s = Qwen3Preset();
  ASSERT_TRUE(WriteRandomCheckpoint(s, a.path()).ok());
  ASSERT_TRUE(WriteRandomCheckpoint(s, b.path()).ok());
  s.seed += 1;
  ASSERT_TRUE(WriteRandomCheckpoint(s, c.path()).ok());
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream o;
    o << in.rdbuf();
    return o.str();
  };
  EXPECT_EQ(read(a.path() + "/model.safetensors"), read(b.path() + "/model.safetensors"));
  EXPECT_NE(read(a.path() + "/model.safetensors"), read(c.path() + "/model.safetensors"));
}

TEST(HfFixture, ArchitectureSpecificNamesAndFields) {
  {
    FixtureDir dir("qwen3_names");
    ASSERT_TRUE(WriteRandomCheckpoint(Qwen3Preset(), dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{32}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.self_attn.q_proj.weight"),
              (std::vector<int64_t>{128, 64}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.self_attn.o_proj.weight"),
              (std::vector<int64_t>{64, 128}));
    EXPECT_FALSE(ckpt->Contains("model.layers.0.self_attn.q_proj.bias"));
  }
  {
    FixtureDir dir("phi3_names");
    ASSERT_TRUE(WriteRandomCheckpoint(Phi3Preset(), dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.self_attn.qkv_proj.weight"),
              (std::vector<int64_t>{128, 64}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.gate_up_proj.weight"),
              (std::vector<int64_t>{256, 64}));
    const json c = ReadJson(dir.path() + "/config.json");
    EXPECT_EQ(c["original_max_position_embeddings"], 16);
    EXPECT_EQ(c["rope_scaling"]["type"], "longrope");
    EXPECT_EQ(c["rope_scaling"]["short_factor"].size(), 8u);
  }
  {
    FixtureDir dir("gemma3_names");
    ASSERT_TRUE(WriteRandomCheckpoint(Gemma3Preset(), dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    for (const char* n :
         {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
          "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm"}) {
      EXPECT_TRUE(ckpt->Contains(std::string("model.layers.5.") + n + ".weight")) << n;
    }
    const json c = ReadJson(dir.path() + "/config.json");
    EXPECT_EQ(c["model_type"], "gemma3_text");
    EXPECT_EQ(c["layer_types"][4], "sliding_attention");
    EXPECT_EQ(c["layer_types"][5], "full_attention");
    EXPECT_EQ(c["rope_local_base_freq"], 10000.0);
  }
  {
    FixtureDir dir("mixtral_names");
    ASSERT_TRUE(WriteRandomCheckpoint(MixtralPreset(), dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.block_sparse_moe.gate.weight"),
              (std::vector<int64_t>{4, 64}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.block_sparse_moe.experts.3.w2.weight"),
              (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(ReadJson(dir.path() + "/config.json")["num_local_experts"], 4);
  }
  {
    FixtureDir dir("qwen3moe_names");
    ASSERT_TRUE(WriteRandomCheckpoint(Qwen3MoePreset(), dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.experts.2.down_proj.weight"),
              (std::vector<int64_t>{64, 48}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.1.mlp.gate_proj.weight"),
              (std::vector<int64_t>{96, 64}));  // mlp_only
    EXPECT_FALSE(ckpt->Contains("model.layers.1.mlp.gate.weight"));
  }
  {
    FixtureDir dir("gptoss_names"), mx("gptoss_mx");
    FixtureSpec s = GptOssPreset();
    ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
    auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.experts.gate_up_proj"),
              (std::vector<int64_t>{4, 64, 128}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.experts.gate_up_proj_bias"),
              (std::vector<int64_t>{4, 128}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.experts.down_proj"),
              (std::vector<int64_t>{4, 64, 64}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.self_attn.sinks"), (std::vector<int64_t>{4}));
    EXPECT_EQ(ShapeOf(*ckpt, "model.layers.0.mlp.router.bias"), (std::vector<int64_t>{4}));
    s.expert_format = ExpertFormat::kMxfp4;
    ASSERT_TRUE(WriteRandomCheckpoint(s, mx.path()).ok());
    auto q = model::SafetensorsCheckpoint::Open(mx.path());
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(ShapeOf(*q, "model.layers.1.mlp.experts.gate_up_proj_blocks"),
              (std::vector<int64_t>{4, 128, 2, 16}));
    EXPECT_EQ(ShapeOf(*q, "model.layers.1.mlp.experts.gate_up_proj_scales"),
              (std::vector<int64_t>{4, 128, 2}));
    EXPECT_EQ(ShapeOf(*q, "model.layers.1.mlp.experts.down_proj_blocks"),
              (std::vector<int64_t>{4, 64, 2, 16}));
    EXPECT_EQ(ReadJson(mx.path() + "/config.json")["quantization_config"]["quant_method"], "mxfp4");
    const json c = ReadJson(dir.path() + "/config.json");
    EXPECT_EQ(c["layer_types"], json::array({"sliding_attention", "full_attention"}));
    EXPECT_EQ(c["rope_scaling"]["truncate"], false);
  }
}

TEST(HfFixture, Qwen3MoeSparseStepPicksTheMoeLayers) {
  FixtureDir dir("sparse_step");
  FixtureSpec s = Qwen3MoePreset();
  s.mlp_only_layers = {};
  s.decoder_sparse_step = 2;  // (i + 1) % 2 == 0: only layer 1 of 0..2
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  auto ckpt = model::SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(ckpt->Contains("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(ckpt->Contains("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(ckpt->Contains("model.layers.2.mlp.gate_proj.weight"));
  auto c = LoadReferenceConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->layers[0].sparse_moe);
  EXPECT_TRUE(c->layers[1].sparse_moe);
  EXPECT_FALSE(c->layers[2].sparse_moe);
}

TEST(HfFixture, InconsistentSpecsAreRejected) {
  FixtureDir dir("bad");
  FixtureSpec s = Qwen2Preset();
  s.head_dim = 32;  // Qwen2 has no head_dim field
  EXPECT_FALSE(WriteRandomCheckpoint(s, dir.path()).ok());
  s = GptOssPreset();
  s.intermediate_size = 48;
  EXPECT_FALSE(WriteRandomCheckpoint(s, dir.path()).ok());
}

TEST(HfFixture, ReferenceConfigRejectsUnknownFieldsAndArchitectures) {
  json c = json::parse(ConfigJson(LlamaPreset()));
  c["some_new_switch"] = true;
  auto r = ParseReferenceConfig(c.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("some_new_switch"), std::string::npos) << r.status();
  c = json::parse(ConfigJson(LlamaPreset()));
  c["architectures"] = {"FancyForCausalLM"};
  r = ParseReferenceConfig(c.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("FancyForCausalLM"), std::string::npos) << r.status();
  c = json::parse(ConfigJson(LlamaPreset()));
  c["rope_scaling"] = {{"rope_type", "warp"}, {"factor", 2.0}};
  r = ParseReferenceConfig(c.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("warp"), std::string::npos) << r.status();
  c = json::parse(ConfigJson(YarnLlama()));
  c["rope_scaling"]["beta_medium"] = 3.0;
  r = ParseReferenceConfig(c.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("beta_medium"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kvserve::testing::hf
