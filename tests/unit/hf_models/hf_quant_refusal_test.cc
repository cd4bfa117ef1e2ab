// Hugging Face quantization variants kvserve does not run are refused at start-up, naming the
// variant and what is supported; the supported ones parse into the expected HfQuantConfig.
#include <string>

#include "gtest/gtest.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/hf_quant_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/unit/hf_models/hf_test_util.h"

namespace kvserve::testing::hf {
namespace {

using json = nlohmann::json;

absl::StatusOr<model::ModelConfig> ParseWith(const FixtureSpec& spec, const json& q) {
  json config = json::parse(ConfigJson(spec));
  config["quantization_config"] = q;
  return model::ParseModelConfig(config.dump(), "config.json");
}

void ExpectRefused(const json& q, const std::vector<std::string>& words) {
  auto c = ParseWith(LlamaPreset(), q);
  ASSERT_FALSE(c.ok()) << q.dump();
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find("quantization_config"), std::string::npos) << msg;
  for (const std::string& w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' in " << msg;
}

json CtConfig(const std::string& format, const json& weights, const json& acts = nullptr) {
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", acts}}}}}};
}

TEST(HfQuantConfigTest, SupportedVariantsParse) {
  auto awq = ParseWith(LlamaPreset(), {{"quant_method", "awq"},
                                       {"bits", 4},
                                       {"group_size", 64},
                                       {"zero_point", true},
                                       {"version", "GEMM"},
                                       {"modules_to_not_convert", {"lm_head"}}});
  ASSERT_TRUE(awq.ok()) << awq.status();
  ASSERT_TRUE(awq->hf_quant.has_value());
  EXPECT_EQ(awq->hf_quant->method, model::HfQuantMethod::kAwq);
  EXPECT_EQ(awq->hf_quant->group_size, 64);
  EXPECT_EQ(awq->hf_quant->Describe(), "awq int4 group 64 asymmetric, not converted: lm_head");

  auto gptq = ParseWith(LlamaPreset(), {{"quant_method", "gptq"},
                                        {"bits", 8},
                                        {"group_size", -1},
                                        {"sym", true},
                                        {"desc_act", false}});
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_EQ(gptq->hf_quant->bits, 8);
  EXPECT_EQ(gptq->hf_quant->group_size, 0);
  EXPECT_TRUE(gptq->hf_quant->gptq_v1_zeros);  // checkpoint_format defaults to "gptq" (v1)

  auto v2 = ParseWith(LlamaPreset(), {{"quant_method", "gptq"},
                                      {"bits", 4},
                                      {"group_size", 128},
                                      {"checkpoint_format", "gptq_v2"}});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_FALSE(v2->hf_quant->gptq_v1_zeros);

  auto w8a8 = ParseWith(
      LlamaPreset(),
      CtConfig("int-quantized",
               {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}},
               {{"num_bits", 8},
                {"type", "int"},
                {"symmetric", true},
                {"dynamic", true},
                {"strategy", "token"}}));
  ASSERT_TRUE(w8a8.ok()) << w8a8.status();
  EXPECT_TRUE(w8a8->hf_quant->w8a8);
  EXPECT_EQ(w8a8->hf_quant->not_converted, std::vector<std::string>{"lm_head"});
}

TEST(HfQuantConfigTest, UnsupportedVariantsAreRefusedByName) {
  ExpectRefused({{"quant_method", "awq"}, {"bits", 4}, {"version", "gemv"}},
                {"AWQ version \"gemv\"", "gemm"});
  ExpectRefused({{"quant_method", "awq"}, {"bits", 4}, {"version", "marlin"}}, {"\"marlin\""});
  ExpectRefused({{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}},
                {"GPTQ with 3 bits", "4 and 8"});
  ExpectRefused({{"quant_method", "gptq"}, {"bits", 2}}, {"GPTQ with 2 bits"});
  ExpectRefused({{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}},
                {"checkpoint_format \"marlin\"", "gptq_v2"});
  ExpectRefused({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 48}},
                {"group_size 48", "multiple of 32"});
  ExpectRefused({{"quant_method", "exl2"}, {"bits", 4}}, {"quant_method \"exl2\"", "awq"});
  ExpectRefused({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}},
                {"quant_method \"bitsandbytes\""});
  ExpectRefused({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}},
                {"FP8", "not supported yet"});
  ExpectRefused(CtConfig("float-quantized", {{"num_bits", 8}, {"type", "float"}}),
                {"FP8", "not supported yet"});
  ExpectRefused(CtConfig("marlin-24", {{"num_bits", 4}, {"type", "int"}}),
                {"format \"marlin-24\"", "pack-quantized"});
  ExpectRefused(
      CtConfig("pack-quantized", {{"num_bits", 4}, {"type", "int"}, {"strategy", "tensor"}}),
      {"strategy \"tensor\""});
  ExpectRefused(
      CtConfig("pack-quantized",
               {{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}},
               {{"num_bits", 8}, {"type", "int"}, {"dynamic", false}}),
      {"input_activations"});
  ExpectRefused(
      CtConfig("int-quantized", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}},
               {{"num_bits", 8}, {"type", "int"}, {"dynamic", false}, {"strategy", "tensor"}}),
      {"input_activations"});
}

// An act-order g_idx whose groups are not all group_size long is refused when the checkpoint
// opens, naming the tensor.
TEST(HfQuantConfigTest, UnequalActOrderGroupsAreRefusedNamingTheTensor) {
  FixtureSpec spec = LlamaPreset();
  FixtureDir src("f"), quant("q"), deq("d");
  ASSERT_TRUE(WriteRandomCheckpoint(spec, src.path()).ok());
  QuantSpec q{QuantFormat::kGptq, 4, 32, true, true};
  q.gidx = QuantSpec::Gidx::kUnequalGroups;
  ASSERT_TRUE(WriteQuantizedFixture(src.path(), q, quant.path(), deq.path()).ok());
  model::ModelOptions opts;
  opts.threads = 1;
  auto m = model::LlamaModel::Load(quant.path(), opts);
  ASSERT_FALSE(m.ok());
  const std::string msg(m.status().message());
  EXPECT_NE(msg.find(".g_idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("act-order g_idx with a group of"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kvserve::testing::hf
