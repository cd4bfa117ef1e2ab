// Hugging Face integer-quantized checkpoints against the float64 reference: a random float
// fixture is quantized and packed as each format stores it (tests/support/hf_models/
// hf_quant_writer.h, written from the format descriptions), served by kvserve's CPU forward from
// the packed directory, and compared with the float64 forward on the same integers dequantized
// in float64 (s * (q - z), from the integers, never from the packing). So a wrong nibble order,
// zero offset, group mapping or scale shows up as a logprob error of order 1.
//
// Bound: as the GGUF reference test (gguf_reference_test.cc): the weights the kernels use are
// exactly the reference's (AWQ/GPTQ fp16 scales run as Q4_0/Q8_0 or with f32 a and exact
// b = -z*s; bf16/f32 scales exactly in f32), and the only error is the kernels' int8
// per-32-element activation rounding (kernels/cpu/quant/panel_format.h), measured 0.02-0.19
// through the fixtures: kQuantTol 0.3. For W8A8 (compressed-tensors int-quantized) the
// checkpoint's own scheme rounds activations per token to int8; ours per 32 elements is at
// least as fine, so the same bound applies against the unrounded reference.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/llama_model.h"
#include "model/load_model_config.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/hf_quant_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/hf_models/reference_diffs.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {
namespace {

constexpr double kQuantTol = 0.3;

struct QuantCase {
  std::string name;
  FixtureSpec spec;
  QuantSpec quant;
};
void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

// The block type a case's projections run as (hf_quant_weights.h): fp16 scales with centred
// zeros take Q4_0 / Q8_0, everything else U4_F32 / U8_F32.
std::string ExpectedBlock(const QuantSpec& q) {
  const bool fp16 =
      q.format == QuantFormat::kAwq || q.format == QuantFormat::kGptq || q.scale_dtype == "F16";
  if (fp16 && q.symmetric) return q.bits == 4 ? "Q4_0" : "Q8_0";
  return q.bits == 4 ? "U4_F32" : "U8_F32";
}

// Rows of 256 and 512 inputs, so groups of 64 and 128 fit every projection.
FixtureSpec Wide(FixtureSpec s) {
  const int head_dim = s.hidden_size / s.num_attention_heads,
            group = s.num_attention_heads / s.num_key_value_heads;
  s.hidden_size = 256;
  s.intermediate_size = 512;
  if (s.moe_intermediate_size > 0) s.moe_intermediate_size = 256;
  s.num_attention_heads = s.hidden_size / head_dim;
  s.num_key_value_heads = s.num_attention_heads / group;
  return s;
}

class HfQuantReferenceTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(HfQuantReferenceTest, LogprobsMatchTheDequantizedReference) {
  const QuantCase& c = GetParam();
  FixtureDir src(c.name + "_f"), quant(c.name + "_q"), deq(c.name + "_d");
  ASSERT_TRUE(WriteRandomCheckpoint(c.spec, src.path()).ok());
  const absl::Status written = WriteQuantizedFixture(src.path(), c.quant, quant.path(), deq.path());
  ASSERT_TRUE(written.ok()) << written;

  auto source = model::OpenModelSource(quant.path());
  ASSERT_TRUE(source.ok()) << source.status();
  auto o_proj = source->checkpoint.Find("model.layers.0.self_attn.o_proj.weight");
  ASSERT_TRUE(o_proj.ok()) << o_proj.status();
  EXPECT_EQ(o_proj->second->dtype, ExpectedBlock(c.quant));
  EXPECT_FALSE(source->checkpoint.Contains("model.layers.0.self_attn.o_proj.qweight"));
  EXPECT_EQ(source->checkpoint.Contains("model.layers.0.self_attn.o_proj.weight_input_order"),
            c.quant.gidx == QuantSpec::Gidx::kActOrder);

  model::ModelOptions opts;
  opts.threads = 1;
  opts.max_tokens_per_step = 64;
  auto m = model::LlamaModel::Load(quant.path(), opts);
  ASSERT_TRUE(m.ok()) << m.status();
  // Weights stay quantized: at most 10 bits per quantized weight (U8_F32) against the fp32
  // model's 32, with the embedding, norms and lm_head alike in both.
  auto float_model = model::LlamaModel::Load(deq.path(), opts);
  ASSERT_TRUE(float_model.ok()) << float_model.status();
  EXPECT_LT((*m)->weights().resident_bytes(), (*float_model)->weights().resident_bytes() / 2);
  const int vocab = c.spec.vocab_size;
  auto diffs = DiffsAgainstReference(**m, deq.path(), TestIds(24, vocab, 3), vocab);
  ASSERT_TRUE(diffs.ok()) << diffs.status();
  std::vector<double> d = *std::move(diffs);
  std::sort(d.begin(), d.end());
  std::printf("[ hfq ] %s: |logprob diff| max %.3g, median %.3g\n", c.name.c_str(), d.back(),
              d[d.size() / 2]);
  // MoE: a router tie within the activation rounding may pick another expert (see the GGUF
  // test); the median position stays within the dense bound.
  EXPECT_LE(c.spec.num_experts == 0 ? d.back() : d[d.size() / 2], kQuantTol);
}

std::vector<QuantCase> Cases() {
  std::vector<QuantCase> v;
  const std::vector<std::pair<std::string, FixtureSpec>> archs = {
      {"llama", Wide(LlamaPreset())},     {"qwen2", Wide(Qwen2Preset())},
      {"qwen3", Wide(Qwen3Preset())},     {"mistral", Wide(MistralPreset(0))},
      {"mixtral", Wide(MixtralPreset())}, {"qwen3moe", Wide(Qwen3MoePreset())}};
  QuantSpec awq{QuantFormat::kAwq, 4, 128, false};
  QuantSpec gptq{QuantFormat::kGptq, 4, 128, true, true};
  QuantSpec ct4{QuantFormat::kCtPack, 4, 128, true};
  ct4.scale_dtype = "BF16";
  for (const auto& [arch, spec] : archs) {
    v.push_back({arch + "_awq_g128", spec, awq});
    v.push_back({arch + "_gptq4_sym_g128", spec, gptq});
    v.push_back({arch + "_ct_w4a16_bf16", spec, ct4});
  }
  const FixtureSpec llama = archs[0].second;
  QuantSpec q = awq;
  q.group = 64;
  q.shards = 2;  // sharded, with model.safetensors.index.json
  v.push_back({"llama_awq_g64_sharded", llama, q});
  q.shards = 1;
  q = {QuantFormat::kGptq, 4, 64, false, false};  // asymmetric, gptq_v2 zeros
  v.push_back({"llama_gptq4_asym_v2_g64", llama, q});
  q = {QuantFormat::kGptq, 4, 128, false, true};  // asymmetric, v1 zeros
  v.push_back({"qwen2_gptq4_asym_v1_g128", archs[1].second, q});
  q = {QuantFormat::kGptq, 4, 64, true, true};  // act-order (desc_act): gathered activations
  q.gidx = QuantSpec::Gidx::kActOrder;
  v.push_back({"llama_gptq4_actorder_g64", llama, q});
  v.push_back({"qwen3moe_gptq4_actorder_g64", archs[5].second, q});
  q = {QuantFormat::kGptq, 4, 128, false, true};
  q.gidx = QuantSpec::Gidx::kActOrder;
  v.push_back({"mixtral_gptq4_asym_actorder_g128", archs[4].second, q});
  q = {QuantFormat::kGptq, 8, 0, true, true};  // int8 per channel, symmetric
  v.push_back({"llama_gptq8_sym_channel", llama, q});
  q = {QuantFormat::kGptq, 8, 128, false, false};
  v.push_back({"qwen3_gptq8_asym_g128", archs[2].second, q});
  q = {QuantFormat::kCtPack, 4, 128, true};  // fp16 scales: runs as Q4_0
  q.scale_dtype = "F16";
  v.push_back({"llama_ct_w4a16_f16", llama, q});
  q = {QuantFormat::kCtPack, 4, 64, false};  // asymmetric, packed zero points
  q.scale_dtype = "BF16";
  v.push_back({"mistral_ct_w4a16_asym_g64", archs[3].second, q});
  q = {QuantFormat::kCtPack, 4, 128, true};  // actorder "group": weight_g_idx
  q.scale_dtype = "BF16";
  q.gidx = QuantSpec::Gidx::kActOrder;
  v.push_back({"qwen2_ct_w4a16_actorder", archs[1].second, q});
  q = {QuantFormat::kCtPack, 8, 0, true};  // W8A16 per channel
  q.scale_dtype = "BF16";
  v.push_back({"qwen3_ct_w8a16_channel", archs[2].second, q});
  q = {QuantFormat::kCtInt8, 8, 0, true};  // W8A8, f32 per-channel scales
  q.scale_dtype = "F32";
  v.push_back({"llama_ct_w8a8", llama, q});
  v.push_back({"qwen3moe_ct_w8a8", archs[5].second, q});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Formats, HfQuantReferenceTest, ::testing::ValuesIn(Cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace kvserve::testing::hf
