#include "lora/peft_config.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace kvserve::lora {
namespace {

PeftConfig Parse(const std::string& json) {
  auto c = ParsePeftConfig(json, "adapter_config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : PeftConfig{};
}

std::string Error(const std::string& json) {
  auto c = ParsePeftConfig(json, "adapter_config.json");
  EXPECT_FALSE(c.ok()) << json;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(PeftConfig, DefaultsAreThoseOfPeft) {
  const PeftConfig c = Parse(R"({"peft_type": "LORA", "target_modules": ["q_proj"]})");
  EXPECT_EQ(c.r(), 8);
  EXPECT_EQ(c.lora_alpha(), 8.0);
  EXPECT_FALSE(c.use_rslora());
  EXPECT_EQ(c.ScaleFor("model.layers.0.self_attn.q_proj"), 1.0);
}

TEST(PeftConfig, ScaleIsAlphaOverRankOrOverSqrtRankWithRsLora) {
  const PeftConfig plain = Parse(R"({"peft_type": "LORA", "r": 16, "lora_alpha": 32})");
  EXPECT_DOUBLE_EQ(plain.ScaleFor("model.layers.0.mlp.up_proj"), 2.0);
  const PeftConfig rs =
      Parse(R"({"peft_type": "LORA", "r": 16, "lora_alpha": 32, "use_rslora": true})");
  EXPECT_DOUBLE_EQ(rs.ScaleFor("model.layers.0.mlp.up_proj"), 32.0 / 4.0);
}

TEST(PeftConfig, FirstMatchingPatternInFileOrderWinsOnWholeNameSuffixes) {
  const PeftConfig c = Parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
      "rank_pattern": {"layers.1.self_attn.q_proj": 4, "q_proj": 2, "layers\\.[0-9]+\\.mlp\\..*": 12},
      "alpha_pattern": {"v_proj": 3.5}})");
  // Exact suffix at a dot boundary.
  EXPECT_EQ(c.RankFor("model.layers.1.self_attn.q_proj"), 4);
  // The more specific key is first, so layer 1 takes it; other layers fall to "q_proj".
  EXPECT_EQ(c.RankFor("model.layers.0.self_attn.q_proj"), 2);
  // "layers.1.self_attn.q_proj" must not match layer 11 (the dot before "layers" is required).
  EXPECT_EQ(c.RankFor("model.layers.11.self_attn.q_proj"), 2);
  // A suffix that is not at a module-name boundary does not match.
  EXPECT_EQ(c.RankFor("model.layers.0.self_attn.xq_proj"), 8);
  EXPECT_EQ(c.RankFor("model.layers.3.mlp.down_proj"), 12);
  EXPECT_EQ(c.RankFor("model.layers.3.self_attn.k_proj"), 8);
  EXPECT_EQ(c.max_rank(), 12);
  EXPECT_EQ(c.AlphaFor("model.layers.0.self_attn.v_proj"), 3.5);
  EXPECT_EQ(c.AlphaFor("model.layers.0.self_attn.q_proj"), 16.0);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.0.self_attn.q_proj"), 16.0 / 2);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.0.self_attn.v_proj"), 3.5 / 8);
}

TEST(PeftConfig, PatternOrderIsTheFilesNotAlphabetical) {
  // "proj" is not a dot-bounded suffix of "a_proj", so only "a_proj" matches.
  const PeftConfig c = Parse(R"({"peft_type": "LORA", "rank_pattern": {"proj": 5, "a_proj": 7}})");
  EXPECT_EQ(c.RankFor("model.layers.0.a_proj"), 7);
  // Both keys match; ".*proj" sorts first but "a_proj" is listed first and wins.
  const PeftConfig d =
      Parse(R"({"peft_type": "LORA", "rank_pattern": {"a_proj": 7, ".*proj": 5}})");
  EXPECT_EQ(d.RankFor("model.layers.0.a_proj"), 7);
  const PeftConfig e =
      Parse(R"({"peft_type": "LORA", "rank_pattern": {".*proj": 5, "a_proj": 7}})");
  EXPECT_EQ(e.RankFor("model.layers.0.a_proj"), 5);
}

TEST(PeftConfig, RefusesWhatItDoesNotComputeByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("use_dora": true)", "use_dora"},
      {R"("modules_to_save": ["lm_head"])", "modules_to_save"},
      {R"("bias": "all")", "bias"},
      {R"("bias": "lora_only")", "bias"},
      {R"("lora_bias": true)", "lora_bias"},
      {R"("fan_in_fan_out": true)", "fan_in_fan_out"},
      {R"("target_parameters": ["mlp.experts.gate_up_proj"])", "target_parameters"},
      {R"("trainable_token_indices": [1, 2])", "trainable_token_indices"},
      {R"("layer_replication": [[0, 2]])", "layer_replication"},
      {R"("alora_invocation_tokens": [5])", "alora_invocation_tokens"},
      {R"("use_qalora": true)", "use_qalora"},
      {R"("init_lora_weights": "pissa")", "init_lora_weights"},
      {R"("init_lora_weights": "loftq")", "init_lora_weights"},
  };
  for (const auto& [field, name] : cases) {
    const std::string msg = Error(std::string(R"({"peft_type": "LORA", )") + field + "}");
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
    EXPECT_NE(msg.find("adapter_config.json"), std::string::npos) << msg;
  }
}

TEST(PeftConfig, AcceptsTheHarmlessDefaultsOfThoseFields) {
  Parse(R"({"peft_type": "LORA", "use_dora": false, "modules_to_save": null, "bias": "none",
            "lora_bias": false, "fan_in_fan_out": false, "target_parameters": null,
            "init_lora_weights": true, "layer_replication": null, "use_qalora": false,
            "trainable_token_indices": null, "alora_invocation_tokens": null,
            "target_modules": "all-linear", "task_type": "CAUSAL_LM", "layers_to_transform": null})");
  Parse(R"({"peft_type": "LORA", "init_lora_weights": "gaussian", "modules_to_save": []})");
}

TEST(PeftConfig, BadInputIsAnErrorNamingTheField) {
  EXPECT_NE(Error("{not json").find("not a JSON object"), std::string::npos);
  EXPECT_NE(Error(R"({"r": 8})").find("peft_type"), std::string::npos);
  EXPECT_NE(Error(R"({"peft_type": "IA3"})").find("peft_type"), std::string::npos);
  EXPECT_NE(Error(R"({"peft_type": "LORA", "r": 0})").find("r:"), std::string::npos);
  EXPECT_NE(Error(R"({"peft_type": "LORA", "r": "8"})").find("r:"), std::string::npos);
  EXPECT_NE(Error(R"({"peft_type": "LORA", "lora_alpha": "x"})").find("lora_alpha"),
            std::string::npos);
  EXPECT_NE(Error(R"({"peft_type": "LORA", "rank_pattern": {"q_proj": 0}})")
                .find("rank_pattern[\"q_proj\"]"),
            std::string::npos);
  EXPECT_NE(
      Error(R"({"peft_type": "LORA", "rank_pattern": {"q_(proj": 4}})").find("regular expression"),
      std::string::npos);
}

TEST(PeftConfig, CanonicalTextChangesWithEveryScaleInput) {
  const std::string base =
      Parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16})").CanonicalText();
  EXPECT_EQ(base, Parse(R"({"lora_alpha": 16, "r": 8, "peft_type": "LORA", "task_type": "X"})")
                      .CanonicalText());
  EXPECT_NE(base, Parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 17})").CanonicalText());
  EXPECT_NE(base, Parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_rslora": true})")
                      .CanonicalText());
  EXPECT_NE(
      base,
      Parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "alpha_pattern": {"q_proj": 2}})")
          .CanonicalText());
}

}  // namespace
}  // namespace kvserve::lora
