// Adapter loading: the PEFT files mapped onto our stacked projections, checked against a
// float64 delta computed from the tensors as written (Δ_m = scale_m · B_m · A_m), and every
// refusal named.
#include "lora/adapter.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/hf_models/presets.h"
#include "tests/unit/lora/lora_test_util.h"

namespace kvserve::lora {
namespace {

using testing::ConfigOf;
using testing::FreshDir;
using testing::LoraConfigJson;
using testing::ModuleWeights;
using testing::RandomModule;
using testing::WriteAdapter;
namespace hf = kvserve::testing::hf;

std::shared_ptr<const Adapter> LoadOk(const std::string& dir, const TargetTable& t,
                                      int max_rank = 64) {
  auto a = Adapter::Load(dir, t, AdapterLoadOptions{max_rank});
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : nullptr;
}

std::string LoadError(const std::string& dir, const TargetTable& t, int max_rank = 64) {
  auto a = Adapter::Load(dir, t, AdapterLoadOptions{max_rank});
  EXPECT_FALSE(a.ok());
  return a.ok() ? "" : std::string(a.status().message());
}

// Element i of an fp32 or bf16 weight array.
double Weight(const float* f32, const uint16_t* bf16, size_t i) {
  if (f32 != nullptr) return f32[i];
  const uint32_t bits = static_cast<uint32_t>(bf16[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The delta the view encodes, read back by the layout of adapter.h / lora_sgmv.h:
// D[o][k] = scale_s Σ_j b_t[j][o] a_t[k][rank_begin + j] over the target's full output rows
// (rows no slice covers stay 0).
std::vector<double> DeltaFromView(const kernels::cpu::LoraWeightsView& v, int in, int out) {
  std::vector<double> d(static_cast<size_t>(out) * in, 0.0);
  const int stride = (v.rank + 7) / 8 * 8;
  for (int s = 0; s < v.num_slices; ++s) {
    const auto& sl = v.slices[s];
    for (int o = 0; o < sl.out_rows; ++o) {
      for (int k = 0; k < in; ++k) {
        double acc = 0;
        for (int j = 0; j < sl.rank; ++j) {
          acc += Weight(sl.b_t, sl.b_t_bf16, static_cast<size_t>(j) * sl.out_rows + o) *
                 Weight(v.a_t, v.a_t_bf16, static_cast<size_t>(k) * stride + sl.rank_begin + j);
        }
        d[static_cast<size_t>(sl.out_begin + o) * in + k] = sl.scale * acc;
      }
    }
  }
  return d;
}

// scale · B · A of one module in float64, written into rows [row0, row0 + out) of D.
void AddReference(const ModuleWeights& m, double scale, int row0, std::vector<double>& d) {
  for (int o = 0; o < m.out; ++o) {
    for (int k = 0; k < m.in; ++k) {
      double acc = 0;
      for (int j = 0; j < m.r; ++j) {
        acc += static_cast<double>(m.b[static_cast<size_t>(o) * m.r + j]) *
               m.a[static_cast<size_t>(j) * m.in + k];
      }
      d[static_cast<size_t>(row0 + o) * m.in + k] += scale * acc;
    }
  }
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

TEST(AdapterLoad, LlamaSevenProjectionsStackIntoQkvAndGateUpWithPatterns) {
  const model::ModelConfig mc = ConfigOf(hf::LlamaPreset());  // D 64, q 64, kv 32, I 128
  const TargetTable targets = TargetTable::ForModel(mc);
  const int d = 64, q = 64, kv = 32, inter = 128;
  struct Mod {
    std::string name;
    int in, out, row0, r;
  };
  std::map<std::string, ModuleWeights> mods;
  std::vector<Mod> list;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    list.push_back({p + "self_attn.q_proj", d, q, 0, 8});
    list.push_back({p + "self_attn.k_proj", d, kv, q, 8});
    list.push_back({p + "self_attn.v_proj", d, kv, q + kv, 4});  // rank_pattern
    list.push_back({p + "self_attn.o_proj", q, d, 0, 8});
    list.push_back({p + "mlp.gate_proj", d, inter, 0, 8});
    list.push_back({p + "mlp.up_proj", d, inter, inter, 8});
    list.push_back({p + "mlp.down_proj", inter, d, 0, l == 1 ? 2 : 8});  // layer-1 pattern
  }
  uint64_t seed = 1;
  for (const Mod& m : list) mods[m.name] = RandomModule(m.r, m.in, m.out, seed++);
  const std::string dir = FreshDir("a");
  WriteAdapter(dir,
               LoraConfigJson(8, 16, R"("rank_pattern": {"v_proj": 4, "layers.1.mlp.down_proj": 2},
                                        "alpha_pattern": {"o_proj": 4})"),
               mods);
  auto ad = LoadOk(dir, targets);
  ASSERT_NE(ad, nullptr);
  EXPECT_EQ(ad->num_modules(), 14);
  EXPECT_EQ(ad->max_module_rank(), 8);
  EXPECT_EQ(ad->max_target_rank(), 20);  // q 8 + k 8 + v 4
  EXPECT_FALSE(ad->touches_experts());
  for (int l = 0; l < 2; ++l) {
    const int iqkv = targets.Index(l, ProjectionKind::kQkv);
    EXPECT_EQ(ad->view(iqkv).rank, 20);
    EXPECT_EQ(ad->view(iqkv).num_slices, 3);
    EXPECT_EQ(ad->view(targets.Index(l, ProjectionKind::kGateUp)).rank, 16);
    EXPECT_EQ(ad->view(targets.Index(l, ProjectionKind::kDown)).rank, l == 1 ? 2 : 8);
  }
  // Every target's delta equals Σ scale_m B_m A_m placed at the module's rows.
  for (int i = 0; i < targets.size(); ++i) {
    const Target& t = targets.targets()[static_cast<size_t>(i)];
    std::vector<double> want(static_cast<size_t>(t.out) * t.in, 0.0);
    for (const Mod& m : list) {
      const TargetTable::ModuleRef* ref = targets.FindModule(m.name);
      ASSERT_NE(ref, nullptr) << m.name;
      if (ref->target != i) continue;
      const bool is_o = m.name.find("o_proj") != std::string::npos;
      AddReference(mods[m.name], (is_o ? 4.0 : 16.0) / m.r, m.row0, want);
    }
    ExpectClose(DeltaFromView(ad->view(i), t.in, t.out), want,
                std::string(ProjectionKindName(t.kind)));
  }
}

TEST(AdapterLoad, QAndVOnlyLeaveKRowsAlone) {
  const model::ModelConfig mc = ConfigOf(hf::LlamaPreset());
  const TargetTable targets = TargetTable::ForModel(mc);
  std::map<std::string, ModuleWeights> mods;
  mods["model.layers.0.self_attn.q_proj"] = RandomModule(4, 64, 64, 11);
  mods["model.layers.0.self_attn.v_proj"] = RandomModule(4, 64, 32, 12);
  const std::string dir = FreshDir("a");
  WriteAdapter(dir, LoraConfigJson(4, 8), mods);
  auto ad = LoadOk(dir, targets);
  ASSERT_NE(ad, nullptr);
  const auto& v = ad->view(targets.Index(0, ProjectionKind::kQkv));
  ASSERT_EQ(v.num_slices, 2);
  EXPECT_EQ(v.slices[0].out_begin, 0);
  EXPECT_EQ(v.slices[1].out_begin, 96);  // v rows after q 64 + k 32
  EXPECT_EQ(v.slices[1].rank_begin, 4);
  std::vector<double> want(128 * 64, 0.0);
  AddReference(mods["model.layers.0.self_attn.q_proj"], 2.0, 0, want);
  AddReference(mods["model.layers.0.self_attn.v_proj"], 2.0, 96, want);
  ExpectClose(DeltaFromView(v, 64, 128), want, "qkv");
  // Layer 1 and the other projections are untouched.
  EXPECT_EQ(ad->view(targets.Index(1, ProjectionKind::kQkv)).rank, 0);
  EXPECT_EQ(ad->view(targets.Index(0, ProjectionKind::kO)).rank, 0);
}

TEST(AdapterLoad, Phi3FusedProjectionsAreOneSliceEach) {
  const model::ModelConfig mc = ConfigOf(hf::Phi3Preset());
  const TargetTable targets = TargetTable::ForModel(mc);
  const int d = mc.hidden_size, qkv = mc.q_size() + 2 * mc.kv_size(), gu = 2 * mc.intermediate_size;
  std::map<std::string, ModuleWeights> mods;
  mods["model.layers.1.self_attn.qkv_proj"] = RandomModule(8, d, qkv, 21);
  mods["model.layers.1.mlp.gate_up_proj"] = RandomModule(8, d, gu, 22);
  const std::string dir = FreshDir("a");
  WriteAdapter(dir, LoraConfigJson(8, 8, R"("use_rslora": true)"), mods);
  auto ad = LoadOk(dir, targets);
  ASSERT_NE(ad, nullptr);
  const double scale = 8.0 / std::sqrt(8.0);
  for (auto [kind, name, out] :
       {std::tuple{ProjectionKind::kQkv, "model.layers.1.self_attn.qkv_proj", qkv},
        std::tuple{ProjectionKind::kGateUp, "model.layers.1.mlp.gate_up_proj", gu}}) {
    const auto& v = ad->view(targets.Index(1, kind));
    ASSERT_EQ(v.num_slices, 1);
    EXPECT_EQ(v.slices[0].out_rows, out);
    std::vector<double> want(static_cast<size_t>(out) * d, 0.0);
    AddReference(mods[name], scale, 0, want);
    ExpectClose(DeltaFromView(v, d, out), want, name);
  }
  // Phi-3 has no separate q_proj.
  std::map<std::string, ModuleWeights> bad;
  bad["model.layers.0.self_attn.q_proj"] = RandomModule(8, d, mc.q_size(), 23);
  const std::string dir2 = FreshDir("b");
  WriteAdapter(dir2, LoraConfigJson(8, 8), bad);
  const std::string msg = LoadError(dir2, targets);
  EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj is not a projection of the base model"),
            std::string::npos)
      << msg;
}

TEST(AdapterLoad, PerExpertLinearModulesOfMixtralAndQwen3Moe) {
  {
    const model::ModelConfig mc = ConfigOf(hf::MixtralPreset());
    const TargetTable targets = TargetTable::ForModel(mc);
    const int d = mc.hidden_size, ie = mc.moe.intermediate_size;
    std::map<std::string, ModuleWeights> mods;
    const std::string e = "model.layers.0.block_sparse_moe.experts.2.";
    mods[e + "w1"] = RandomModule(4, d, ie, 31);
    mods[e + "w3"] = RandomModule(4, d, ie, 32);
    mods[e + "w2"] = RandomModule(4, ie, d, 33);
    const std::string dir = FreshDir("mixtral");
    WriteAdapter(dir, LoraConfigJson(4, 4), mods);
    auto ad = LoadOk(dir, targets);
    ASSERT_NE(ad, nullptr);
    EXPECT_TRUE(ad->touches_experts());
    const auto& gu = ad->view(targets.Index(0, ProjectionKind::kExpertGateUp, 2));
    ASSERT_EQ(gu.num_slices, 2);
    std::vector<double> want(static_cast<size_t>(2 * ie) * d, 0.0);
    AddReference(mods[e + "w1"], 1.0, 0, want);   // w1 = gate
    AddReference(mods[e + "w3"], 1.0, ie, want);  // w3 = up
    ExpectClose(DeltaFromView(gu, d, 2 * ie), want, "expert gate_up");
    EXPECT_EQ(ad->view(targets.Index(0, ProjectionKind::kExpertDown, 2)).rank, 4);
    EXPECT_EQ(ad->view(targets.Index(0, ProjectionKind::kExpertDown, 1)).rank, 0);
    EXPECT_EQ(targets.Index(0, ProjectionKind::kGateUp), -1);  // a MoE layer has no dense MLP
  }
  {
    const model::ModelConfig mc = ConfigOf(hf::Qwen3MoePreset());  // layer 1 dense
    const TargetTable targets = TargetTable::ForModel(mc);
    std::map<std::string, ModuleWeights> mods;
    mods["model.layers.0.mlp.experts.3.down_proj"] =
        RandomModule(4, mc.moe.intermediate_size, mc.hidden_size, 41);
    mods["model.layers.1.mlp.down_proj"] =
        RandomModule(4, mc.intermediate_size, mc.hidden_size, 42);
    const std::string dir = FreshDir("qwen3moe");
    WriteAdapter(dir, LoraConfigJson(4, 4), mods);
    auto ad = LoadOk(dir, targets);
    ASSERT_NE(ad, nullptr);
    EXPECT_EQ(ad->view(targets.Index(0, ProjectionKind::kExpertDown, 3)).rank, 4);
    EXPECT_EQ(ad->view(targets.Index(1, ProjectionKind::kDown)).rank, 4);
    // The router is not a LoRA target.
    std::map<std::string, ModuleWeights> bad;
    bad["model.layers.0.mlp.gate"] = RandomModule(4, mc.hidden_size, mc.moe.num_experts, 43);
    const std::string dir2 = FreshDir("router");
    WriteAdapter(dir2, LoraConfigJson(4, 4), bad);
    EXPECT_NE(LoadError(dir2, targets).find("model.layers.0.mlp.gate is not a projection"),
              std::string::npos);
  }
}

TEST(AdapterLoad, GptOssFusedExpertsAreNotTargetable) {
  const model::ModelConfig mc = ConfigOf(hf::GptOssPreset());
  const TargetTable targets = TargetTable::ForModel(mc);
  EXPECT_EQ(targets.Index(0, ProjectionKind::kExpertGateUp, 0), -1);
  EXPECT_NE(targets.Index(0, ProjectionKind::kQkv), -1);
  EXPECT_EQ(targets.FindModule("model.layers.0.mlp.experts.gate_up_proj"), nullptr);
}

TEST(AdapterLoad, Bf16TensorsAreWidenedExactly) {
  const model::ModelConfig mc = ConfigOf(hf::LlamaPreset());
  const TargetTable targets = TargetTable::ForModel(mc);
  std::map<std::string, ModuleWeights> mods;
  mods["model.layers.0.self_attn.o_proj"] = RandomModule(8, 64, 64, 51);
  const std::string dir = FreshDir("a");
  WriteAdapter(dir, LoraConfigJson(8, 4), mods, /*bf16=*/true);  // scale 0.5
  auto ad = LoadOk(dir, targets);
  ASSERT_NE(ad, nullptr);
  EXPECT_TRUE(ad->bf16());  // kept as bf16, the scale apart
  ModuleWeights rounded = mods["model.layers.0.self_attn.o_proj"];
  rounded.a = testing::Bf16Rounded(rounded.a);
  rounded.b = testing::Bf16Rounded(rounded.b);
  std::vector<double> want(64 * 64, 0.0);
  AddReference(rounded, 0.5, 0, want);
  ExpectClose(DeltaFromView(ad->view(targets.Index(0, ProjectionKind::kO)), 64, 64), want, "o");
  EXPECT_EQ(ad->view(targets.Index(0, ProjectionKind::kO)).slices[0].scale, 0.5f);
}

class AdapterRefusal : public ::testing::Test {
 protected:
  model::ModelConfig mc_ = ConfigOf(hf::LlamaPreset());
  TargetTable targets_ = TargetTable::ForModel(mc_);
  std::map<std::string, ModuleWeights> One() {
    std::map<std::string, ModuleWeights> m;
    m["model.layers.0.self_attn.q_proj"] = RandomModule(8, 64, 64, 61);
    return m;
  }
  std::string Refuse(const std::string& config, std::map<std::string, ModuleWeights> mods,
                     std::vector<hf::TensorBlob> extra = {}, int max_rank = 64) {
    const std::string dir = FreshDir(std::to_string(n_++));
    WriteAdapter(dir, config, mods, false, std::move(extra));
    return LoadError(dir, targets_, max_rank);
  }
  int n_ = 0;
};

TEST_F(AdapterRefusal, ConfigRefusalsSurfaceAtLoad) {
  EXPECT_NE(Refuse(LoraConfigJson(8, 8, R"("use_dora": true)"), One()).find("use_dora"),
            std::string::npos);
  std::string msg =
      Refuse(R"({"peft_type": "LORA", "r": 8, "modules_to_save": ["lm_head"]})", One());
  EXPECT_NE(msg.find("modules_to_save"), std::string::npos) << msg;
}

TEST_F(AdapterRefusal, TensorsOfUnsupportedFeaturesAreNamed) {
  auto blob = [](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return hf::MakeFloatTensor(name, shape, std::vector<float>(static_cast<size_t>(n), 0.5f),
                               false);
  };
  std::string msg = Refuse(
      LoraConfigJson(8, 8), One(),
      {blob("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {64})});
  EXPECT_NE(msg.find("DoRA"), std::string::npos) << msg;
  msg = Refuse(LoraConfigJson(8, 8), One(),
               {blob("base_model.model.model.embed_tokens.lora_embedding_A", {8, 256})});
  EXPECT_NE(msg.find("embeddings is not supported"), std::string::npos) << msg;
  msg = Refuse(LoraConfigJson(8, 8), One(),
               {blob("base_model.model.lm_head.lora_A.weight", {8, 64})});
  EXPECT_NE(msg.find("lm_head is not supported"), std::string::npos) << msg;
  msg = Refuse(LoraConfigJson(8, 8), One(), {blob("base_model.model.lm_head.weight", {256, 64})});
  EXPECT_NE(msg.find("modules_to_save"), std::string::npos) << msg;
  msg = Refuse(LoraConfigJson(8, 8), One(),
               {blob("base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias", {64})});
  EXPECT_NE(msg.find("lora_bias"), std::string::npos) << msg;
}

TEST_F(AdapterRefusal, ModulesTheBaseDoesNotHave) {
  std::map<std::string, ModuleWeights> m;
  m["model.layers.2.self_attn.q_proj"] = RandomModule(8, 64, 64, 62);  // the base has 2 layers
  const std::string msg = Refuse(LoraConfigJson(8, 8), m);
  EXPECT_NE(msg.find("model.layers.2.self_attn.q_proj is not a projection of the base model "
                     "(LlamaForCausalLM)"),
            std::string::npos)
      << msg;
}

TEST_F(AdapterRefusal, ShapeMismatchNamesTensorExpectedAndGot) {
  std::map<std::string, ModuleWeights> m;
  m["model.layers.0.self_attn.k_proj"] = RandomModule(8, 64, 64, 63);  // k has 32 rows
  std::string msg = Refuse(LoraConfigJson(8, 8), m);
  EXPECT_NE(msg.find("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("expected shape [32, 8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got [64, 8]"), std::string::npos) << msg;
  // A rank that disagrees with the config's r.
  msg = Refuse(LoraConfigJson(4, 8), One());
  EXPECT_NE(msg.find("lora_A.weight: expected shape [4, 64]"), std::string::npos) << msg;
}

TEST_F(AdapterRefusal, RankAboveMaxLoraRank) {
  std::string msg = Refuse(LoraConfigJson(8, 8), One(), {}, /*max_rank=*/4);
  EXPECT_NE(msg.find("rank 8 (r / rank_pattern) exceeds max_lora_rank 4"), std::string::npos)
      << msg;
  msg = Refuse(LoraConfigJson(2, 8, R"("rank_pattern": {"q_proj": 8})"), One(), {}, 4);
  EXPECT_NE(msg.find("exceeds max_lora_rank 4"), std::string::npos) << msg;
}

TEST_F(AdapterRefusal, MissingPartnersAndFiles) {
  const std::string dir = FreshDir("partner");
  std::ofstream(dir + "/adapter_config.json") << LoraConfigJson(8, 8);
  auto st = hf::WriteSafetensors(
      {hf::MakeFloatTensor("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                           {8, 64}, std::vector<float>(512, 0.1f), false)},
      dir, 1);
  ASSERT_TRUE(st.ok());
  std::filesystem::rename(dir + "/model.safetensors", dir + "/adapter_model.safetensors");
  std::string msg = LoadError(dir, targets_);
  EXPECT_NE(msg.find("has lora_A but no lora_B"), std::string::npos) << msg;

  const std::string bin = FreshDir("bin");
  std::ofstream(bin + "/adapter_config.json") << LoraConfigJson(8, 8);
  std::ofstream(bin + "/adapter_model.bin") << "pickle";
  msg = LoadError(bin, targets_);
  EXPECT_NE(msg.find("pickle adapters are not supported"), std::string::npos) << msg;

  auto missing = Adapter::Load(FreshDir("empty"), targets_, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(AdapterDigest, DependsOnWeightsAndScaleNotOnThePath) {
  const model::ModelConfig mc = ConfigOf(hf::LlamaPreset());
  const TargetTable targets = TargetTable::ForModel(mc);
  std::map<std::string, ModuleWeights> mods;
  mods["model.layers.0.self_attn.q_proj"] = RandomModule(8, 64, 64, 71);
  const std::string d1 = FreshDir("1"), d2 = FreshDir("2"), d3 = FreshDir("3"), d4 = FreshDir("4");
  WriteAdapter(d1, LoraConfigJson(8, 16), mods);
  WriteAdapter(d2, LoraConfigJson(8, 16, R"("task_type": "CAUSAL_LM")"), mods);
  WriteAdapter(d3, LoraConfigJson(8, 32), mods);
  auto changed = mods;
  changed["model.layers.0.self_attn.q_proj"].b[5] += 0.01f;
  WriteAdapter(d4, LoraConfigJson(8, 16), changed);
  auto a1 = LoadOk(d1, targets), a2 = LoadOk(d2, targets), a3 = LoadOk(d3, targets),
       a4 = LoadOk(d4, targets);
  ASSERT_TRUE(a1 && a2 && a3 && a4);
  EXPECT_EQ(a1->digest(), a2->digest());  // same weights, same scale, other dir
  EXPECT_NE(a1->digest(), a3->digest());  // alpha changed
  EXPECT_NE(a1->digest(), a4->digest());  // one weight changed
  EXPECT_NE(a1->digest().key64(), a4->digest().key64());
  EXPECT_EQ(a1->digest().hex().size(), 64u);
}

}  // namespace
}  // namespace kvserve::lora
