// Hugging Face FP8 checkpoints against the float64 reference: a random fixture is rewritten
// as an FP8 checkpoint (tests/support/hf_models/fp8_checkpoint.h: quant_method fp8 with
// weight_scale_inv blocks, or compressed-tensors per-tensor / per-channel / per-group / block
// scales), served by kvserve's CPU forward from that directory, and compared with the float64
// forward on the same weights dequantized from the e4m3 definition (fp8_e4m3.h, independent
// of the kernels). Plus the refusals, by name.
//
// Bound: the FP8 kernels round nothing but fp32 operations (activations stay fp32;
// kernels/cpu/quant/fp8_format.h states the per-output bound, (64 + in/128 + 3) ulp of
// Σ|s w x|), and the reference's weights are e4m3·s rounded once to fp32 where the kernel
// applies s per 128-column partial sum: a further 2^-24 relative per weight. Carried through
// the fixtures to the logprobs this measures 0.7e-6 to 3.5e-6 (every case prints its figure);
// kFp8Tol = 2e-5 leaves a 5x margin, while a scale taken from the wrong column block measures
// 1.7e-3 and a wrong group 0.16 (tried while writing this test), so such errors fail.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/hf_fp8_config.h"
#include "model/llama_model.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/fp8_checkpoint.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/hf_models/reference_diffs.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {
namespace {

constexpr double kFp8Tol = 2e-5;

struct Fp8Case {
  std::string name;
  FixtureSpec spec;
  Fp8FixtureOptions options;
};

absl::StatusOr<std::unique_ptr<model::LlamaModel>> LoadCpu(const std::string& dir) {
  model::ModelOptions opts;
  opts.threads = 1;
  opts.max_tokens_per_step = 128;
  return model::LlamaModel::Load(dir, opts);
}

class Fp8ReferenceTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8ReferenceTest, LogprobsMatchTheDequantizedReference) {
  const Fp8Case& c = GetParam();
  FixtureDir src(c.name + "_src"), fp8(c.name + "_fp8"), deq(c.name + "_deq");
  ASSERT_TRUE(WriteRandomCheckpoint(c.spec, src.path()).ok());
  const absl::Status written = WriteFp8Checkpoint(src.path(), c.options, fp8.path(), deq.path());
  ASSERT_TRUE(written.ok()) << written;
  auto m = LoadCpu(fp8.path());
  ASSERT_TRUE(m.ok()) << m.status();
  const int vocab = c.spec.vocab_size;
  auto d = DiffsAgainstReference(**m, deq.path(), TestIds(40, vocab, 1), vocab);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<double>& diffs = *d;
  const double worst = *std::max_element(diffs.begin(), diffs.end());
  std::printf("[ fp8 ] %s: |logprob diff| max %.3g\n", c.name.c_str(), worst);
  EXPECT_LE(worst, kFp8Tol);
}

// 192 hidden and 320 intermediate: neither a multiple of 128, so every matrix has ragged
// edge blocks in rows and columns (and full ones).
FixtureSpec Ragged(FixtureSpec s) {
  const int head_dim = s.hidden_size / s.num_attention_heads,
            group = s.num_attention_heads / s.num_key_value_heads;
  s.hidden_size = 192;
  s.intermediate_size = 320;
  s.num_attention_heads = s.hidden_size / head_dim;
  s.num_key_value_heads = s.num_attention_heads / group;
  if (s.moe_intermediate_size > 0) s.moe_intermediate_size = 160;
  return s;
}

Fp8FixtureOptions Fp8Block() { return {}; }
Fp8FixtureOptions Ct(int64_t rows, int64_t cols, bool static_act = false) {
  Fp8FixtureOptions o;
  o.compressed_tensors = true;
  o.block_rows = rows;
  o.block_cols = cols;
  o.static_activations = static_act;
  return o;
}

std::vector<Fp8Case> Cases() {
  std::vector<Fp8Case> v;
  const std::vector<std::pair<std::string, FixtureSpec>> archs = {
      {"llama", LlamaPreset()},      {"qwen2", Qwen2Preset()},     {"qwen3", Qwen3Preset()},
      {"mistral", MistralPreset(8)}, {"mixtral", MixtralPreset()}, {"qwen3moe", Qwen3MoePreset()}};
  for (const auto& [arch, spec] : archs) {
    v.push_back({arch + "_fp8_block128", Ragged(spec), Fp8Block()});
    v.push_back({arch + "_ct_channel", spec, Ct(1, 0)});
  }
  v.push_back({"llama_ct_tensor_static", Ragged(LlamaPreset()), Ct(0, 0, true)});
  v.push_back({"llama_ct_block128", Ragged(LlamaPreset()), Ct(128, 128)});
  v.push_back({"llama_ct_group128", Ragged(LlamaPreset()), Ct(1, 128)});
  v.push_back({"qwen3moe_ct_block128", Ragged(Qwen3MoePreset()), Ct(128, 128)});
  Fp8FixtureOptions per_tensor;
  per_tensor.block_rows = per_tensor.block_cols = 0;
  per_tensor.static_activations = true;
  v.push_back({"llama_fp8_tensor_static", LlamaPreset(), per_tensor});
  // bf16 scale_inv, 64-row blocks, and one module left unconverted (a stacked q | k | v of
  // FP8, F32 and FP8 segments).
  Fp8FixtureOptions mixed;
  mixed.block_rows = 64;
  mixed.bf16_scales = true;
  mixed.not_converted = {"model.layers.0.self_attn.k_proj"};
  v.push_back({"qwen2_fp8_block64x128_bf16_mixed", Ragged(Qwen2Preset()), mixed});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8ReferenceTest, ::testing::ValuesIn(Cases()),
                         [](const auto& p) { return p.param.name; });

// ---- refusals ----

std::string ParseError(const std::string& quantization_config) {
  auto c = model::ParseHfFp8Config(quantization_config);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(Fp8Config, RefusesUnsupportedVariantsByName) {
  EXPECT_NE(ParseError(R"({"quant_method":"fp8","fmt":"e5m2","weight_block_size":[128,128]})")
                .find("e5m2"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"quant_method":"fp8","weight_block_size":[128,64]})").find("[128,64]"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"quant_method":"fp8","activation_scheme":"static",)"
                       R"("weight_block_size":[128,128]})")
                .find("static"),
            std::string::npos);
  const std::string ct_head =
      R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":)";
  EXPECT_NE(ParseError(ct_head + R"({"weights":{"type":"float","num_bits":8,"strategy":"group",)"
                                 R"("group_size":32}}}})")
                .find("group_size 32"),
            std::string::npos);
  EXPECT_NE(ParseError(ct_head + R"({"weights":{"type":"float","num_bits":8,"strategy":"channel"},)"
                                 R"("input_activations":{"type":"int","num_bits":8}}}})")
                .find("int 8-bit activations"),
            std::string::npos);
  EXPECT_NE(ParseError(ct_head + R"({"weights":{"type":"float","num_bits":8,"symmetric":false}}}})")
                .find("asymmetric"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized",)"
                       R"("config_groups":{"g":{"weights":{"type":"float","num_bits":4}}}})")
                .find("nvfp4-pack-quantized"),
            std::string::npos);
}

TEST(Fp8Config, AcceptsTheSupportedOnesAndLeavesOthersAlone) {
  auto block = model::ParseHfFp8Config(
      R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic",)"
      R"("weight_block_size":[128,128],"modules_to_not_convert":["lm_head","re:.*mlp\\.gate$"]})");
  ASSERT_TRUE(block.ok() && block->has_value()) << block.status();
  EXPECT_EQ((*block)->block_rows, 128);
  EXPECT_EQ((*block)->scale_suffix, "weight_scale_inv");
  EXPECT_TRUE((*block)->Ignored("lm_head"));
  EXPECT_TRUE((*block)->Ignored("model.layers.3.mlp.gate"));
  EXPECT_FALSE((*block)->Ignored("model.layers.3.mlp.gate_proj"));
  auto ct = model::ParseHfFp8Config(Fp8QuantizationConfigJson(Ct(1, 0)));
  ASSERT_TRUE(ct.ok() && ct->has_value()) << ct.status();
  EXPECT_EQ((*ct)->block_rows, 1);
  EXPECT_EQ((*ct)->block_cols, 0);
  // Integer formats are another parser's.
  for (const char* other :
       {R"({"quant_method":"gptq","bits":4})", R"({"quant_method":"awq","bits":4})",
        R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":)"
        R"({"g":{"weights":{"type":"int","num_bits":4}}}})"}) {
    auto c = model::ParseHfFp8Config(other);
    ASSERT_TRUE(c.ok()) << other;
    EXPECT_FALSE(c->has_value()) << other;
  }
}

// Loader refusals on a written checkpoint: each names the tensor and what is wrong.
class Fp8LoadRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteRandomCheckpoint(LlamaPreset(), src_.path()).ok());
    ASSERT_TRUE(WriteFp8Checkpoint(src_.path(), Ct(1, 0), fp8_.path(), deq_.path()).ok());
  }
  // Rewrites the FP8 checkpoint's config.json with `edit` applied to its text.
  void EditConfig(const std::string& from, const std::string& to) {
    std::ifstream in(fp8_.path() + "/config.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(fp8_.path() + "/config.json") << text;
  }
  std::string LoadError() {
    auto m = LoadCpu(fp8_.path());
    return m.ok() ? "" : std::string(m.status().message());
  }
  FixtureDir src_{"src"}, fp8_{"fp8"}, deq_{"deq"};
};

TEST_F(Fp8LoadRefusal, ScaleShapeThatDoesNotFitTheScheme) {
  EditConfig(R"("strategy": "channel")", R"("strategy": "tensor")");
  EXPECT_NE(LoadError().find("weight_scale\": shape [64, 1] does not fit"), std::string::npos)
      << LoadError();
}

TEST_F(Fp8LoadRefusal, Fp8TensorListedAsNotConverted) {
  EditConfig(R"("lm_head",)", R"("lm_head", "model.layers.1.mlp.down_proj",)");
  EXPECT_NE(LoadError().find("model.layers.1.mlp.down_proj.weight\": is stored as F8_E4M3 but"),
            std::string::npos)
      << LoadError();
}

TEST_F(Fp8LoadRefusal, Fp8TensorsWithoutQuantizationConfig) {
  std::filesystem::copy_file(deq_.path() + "/config.json", fp8_.path() + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_NE(LoadError().find("no FP8 quantization_config"), std::string::npos) << LoadError();
}

TEST_F(Fp8LoadRefusal, E5m2Weights) {
  // Same byte count: relabel one projection's dtype in the safetensors header.
  const std::string path = fp8_.path() + "/model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const size_t at = bytes.find("F8_E4M3");
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at));
  f.write("F8_E5M2", 7);
  f.close();
  EXPECT_NE(LoadError().find("F8_E5M2"), std::string::npos) << LoadError();
}

}  // namespace
}  // namespace kvserve::testing::hf
