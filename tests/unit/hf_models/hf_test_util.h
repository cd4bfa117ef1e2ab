// Helpers of the hf_models tests: a fixture directory under the gtest temp dir (removed
// afterwards), the preset list, and logprob comparison.
#pragma once

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"

namespace kvserve::testing::hf {

class FixtureDir {
 public:
  explicit FixtureDir(const std::string& name) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string leaf = "hf_models_" + std::to_string(::getpid()) + "_" +
                       (info ? std::string(info->test_suite_name()) + "." + info->name() : "x") +
                       "_" + name;
    std::replace(leaf.begin(), leaf.end(), '/', '_');  // parameterised test names carry '/'
    path_ = ::testing::TempDir() + "/" + leaf;
    std::filesystem::remove_all(path_);
  }
  ~FixtureDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  FixtureDir(const FixtureDir&) = delete;
  FixtureDir& operator=(const FixtureDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline FixtureSpec YarnLlama() {
  FixtureSpec s = LlamaPreset();
  // L0 256 puts the β ramp at pairs 0.21..3.22 of 8 (0..4 truncated).
  s.rope_scaling = YarnRope(4.0, 256);
  s.rope_scaling.beta_fast = 32.0;
  s.rope_scaling.beta_slow = 1.0;
  s.max_position_embeddings = 1024;
  return s;
}

inline std::vector<std::pair<std::string, FixtureSpec>> AllPresets() {
  std::vector<std::pair<std::string, FixtureSpec>> v = {
      {"llama", LlamaPreset()},       {"qwen2", Qwen2Preset()},       {"qwen3", Qwen3Preset()},
      {"mistral", MistralPreset(8)},  {"gemma2", Gemma2Preset()},     {"gemma3", Gemma3Preset()},
      {"phi3", Phi3Preset()},         {"phi4mini", Phi4MiniPreset()}, {"mixtral", MixtralPreset()},
      {"qwen3moe", Qwen3MoePreset()}, {"gptoss", GptOssPreset()},     {"yarn_llama", YarnLlama()}};
  FixtureSpec mx = GptOssPreset();
  mx.expert_format = ExpertFormat::kMxfp4;
  v.emplace_back("gptoss_mxfp4", mx);
  return v;
}

// The fixtures every backend's forward is checked on against the float64 reference: the CPU's
// KvserveAgreementTest (tests/unit/hf_models) and the CUDA model's CudaHfAgreement
// (tests/unit/cuda, its fp32 ones).
struct AgreementFixture {
  std::string name;
  FixtureSpec spec;
  int64_t max_context = 0;  // ModelOptions::max_context (the served length fixes dynamic/longrope)
  int greedy_prompt = 6;    // prompt tokens of the greedy run
};

inline std::vector<AgreementFixture> AgreementFixtures() {
  std::vector<AgreementFixture> v;
  v.push_back({"llama", LlamaPreset()});
  FixtureSpec s = LlamaPreset();
  s.attention_bias = true;
  v.push_back({"llama_attention_bias", s});
  s = LlamaPreset();
  s.rope_scaling = LinearRope(4.0);
  v.push_back({"llama_linear", s});
  s = LlamaPreset();
  s.rope_scaling = Llama3Rope(8.0, 32);  // L0 32: the bands fall inside head_dim 16's range
  v.push_back({"llama_llama3", s});
  s = LlamaPreset();
  s.tie_word_embeddings = true;
  s.num_shards = 2;
  v.push_back({"llama_tied_sharded", s});
  v.push_back({"qwen2", Qwen2Preset()});
  s = Qwen2Preset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"qwen2_bf16", s});
  v.push_back({"mistral", MistralPreset(0)});
  // A window no shorter than the 40-token prompts: kvserve runs it as full attention.
  v.push_back({"mistral_window64", MistralPreset(64)});
  v.push_back({"qwen3", Qwen3Preset()});
  s = Qwen3Preset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"qwen3_bf16", s});
  // Fused qkv_proj / gate_up_proj, longrope past its 16-token original context (the
  // 40-token prompts use the long factors in Hugging Face and in kvserve's served table).
  // The greedy run starts past L0 too: Hugging Face picks the factors by the length of each
  // forward, kvserve once by the served context (docs/models.md).
  v.push_back({"phi3_longrope", Phi3Preset(), 0, 20});
  // partial_rotary_factor 0.75: 12 of 16 dims rotate, pairs (f, f + 6).
  v.push_back({"phi4mini", Phi4MiniPreset(), 0, 20});
  v.push_back({"llama_yarn", YarnLlama()});
  // Dynamic NTK equals Hugging Face exactly while the served context stays within
  // max_position_embeddings (model/rope_table.h).
  s = LlamaPreset();
  s.rope_scaling = DynamicRope(2.0);
  s.max_position_embeddings = 64;
  v.push_back({"llama_dynamic", s, 64});
  // Sliding windows shorter than the 40-token prompts and the 14-token greedy run: the
  // prefill tiles and the decode rows both mask exactly.
  v.push_back({"mistral_window8", MistralPreset(8)});
  s = Qwen2Preset();
  s.sliding_window = 8;
  s.use_sliding_window = true;
  s.max_window_layers = 1;  // layer 0 full, layer 1 windowed
  v.push_back({"qwen2_window8", s});
  // GeGLU, (1 + w) sandwich norms, softcaps 50 / 30, even layers windowed (8).
  v.push_back({"gemma2", Gemma2Preset()});
  // 5 local (window 8, local RoPE base) : 1 global, q/k norms, query_pre_attn_scalar.
  v.push_back({"gemma3", Gemma3Preset()});
  s = Gemma3Preset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"gemma3_bf16", s});
  // Mixture of experts (model/moe_layer.h): softmax, top-2 of 4, renormalised.
  v.push_back({"mixtral", MixtralPreset()});
  s = MixtralPreset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"mixtral_bf16", s});
  // Layer 1 of 3 is the dense MLP (mlp_only_layers), with its own intermediate size.
  v.push_back({"qwen3_moe", Qwen3MoePreset()});
  s = Qwen3MoePreset();
  s.dtype = WeightDtype::kBf16;
  v.push_back({"qwen3_moe_bf16", s});
  // No renormalisation, and decoder_sparse_step 2 makes layer 1 the only sparse one.
  s = Qwen3MoePreset();
  s.norm_topk_prob = false;
  s.decoder_sparse_step = 2;
  s.mlp_only_layers = {};
  v.push_back({"qwen3_moe_step2_unnormalised", s});
  // gpt-oss: learned sinks, window 8 on even layers, yarn, experts with biases and the
  // clamped SwiGLU; dequantised and MXFP4 experts.
  v.push_back({"gpt_oss", GptOssPreset()});
  s = GptOssPreset();
  s.expert_format = ExpertFormat::kMxfp4;
  v.push_back({"gpt_oss_mxfp4", s});
  return v;
}

// Token ids spread over the vocab, deterministic.
inline std::vector<int32_t> TestIds(int n, int vocab, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(static_cast<int32_t>((i * 37 + 11 + salt * 101) % vocab));
  return ids;
}

// The largest |logprob difference| at each of `positions` positions between kvserve's logits
// (`got`: [positions][vocab], log-softmaxed here) and the reference's.
inline std::vector<double> PositionLogprobDiffs(const std::vector<float>& got, const Reference& ref,
                                                size_t positions, int vocab) {
  std::vector<double> out;
  for (size_t t = 0; t < positions; ++t) {
    const std::vector<double> want = ref.LogProbs(t);
    const float* row = got.data() + t * static_cast<size_t>(vocab);
    double mx = row[0];
    for (int v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    const double lse = mx + std::log(sum);
    double worst = 0;
    for (int v = 0; v < vocab; ++v)
      worst = std::max(worst, std::abs(row[v] - lse - want[static_cast<size_t>(v)]));
    out.push_back(worst);
  }
  return out;
}

}  // namespace kvserve::testing::hf
