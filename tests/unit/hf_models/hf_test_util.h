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

// Token ids spread over the vocab, deterministic.
inline std::vector<int32_t> TestIds(int n, int vocab, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(static_cast<int32_t>((i * 37 + 11 + salt * 101) % vocab));
  return ids;
}

}  // namespace kvserve::testing::hf
