// Helpers of the LoRA tests: a base model's config from a fixture preset, and PEFT adapter
// directories written at test time exactly as PEFT's save_pretrained lays them out
// (adapter_config.json + adapter_model.safetensors with base_model.model.<module>.lora_A/B.weight
// keys, A [r][in], B [out][r]).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/model_config.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/fixture_spec.h"
#include "tests/support/hf_models/safetensors_writer.h"

namespace kvserve::lora::testing {

namespace hf = kvserve::testing::hf;

inline model::ModelConfig ConfigOf(const hf::FixtureSpec& spec) {
  auto c = model::ParseModelConfig(hf::ConfigJson(spec), "fixture");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// Every directory FreshDir makes lives under one per-process root, removed when the test
// program ends (a global environment registered once by this inline variable).
inline std::string TestRoot() {
  static const std::string root =
      (std::filesystem::path(::testing::TempDir()) / ("kvserve_lora_" + std::to_string(::getpid())))
          .string();
  return root;
}
class RemoveTestRoot : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(TestRoot(), ec);
  }
};
inline const bool kTestRootCleanup =
    (::testing::AddGlobalTestEnvironment(new RemoveTestRoot), true);

// A fresh, empty directory under the test root, named after the running test.
inline std::string FreshDir(const std::string& tag) {
  namespace fs = std::filesystem;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name() + "_" + tag;
  for (char& ch : name) {
    if (ch == '/') ch = '_';
  }
  const fs::path p = fs::path(TestRoot()) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// One module's A [r][in] and B [out][r], row-major.
struct ModuleWeights {
  int r = 0, in = 0, out = 0;
  std::vector<float> a, b;
};

inline ModuleWeights RandomModule(int r, int in, int out, uint64_t seed, float std_a = 0.2f,
                                  float std_b = 0.2f) {
  ModuleWeights m{r, in, out, {}, {}};
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> ua(-std_a, std_a), ub(-std_b, std_b);
  m.a.resize(static_cast<size_t>(r) * in);
  m.b.resize(static_cast<size_t>(out) * r);
  for (float& v : m.a) v = ua(gen);
  for (float& v : m.b) v = ub(gen);
  return m;
}

// Writes a PEFT adapter directory: `config_json` verbatim, and for each module its
// lora_A / lora_B tensors (F32, or BF16 when `bf16`). `extra` tensors are written as given.
inline void WriteAdapter(const std::string& dir, const std::string& config_json,
                         const std::map<std::string, ModuleWeights>& modules, bool bf16 = false,
                         std::vector<hf::TensorBlob> extra = {}) {
  std::ofstream(dir + "/adapter_config.json") << config_json;
  std::vector<hf::TensorBlob> tensors = std::move(extra);
  for (const auto& [module, m] : modules) {
    const std::string p = "base_model.model." + module;
    tensors.push_back(hf::MakeFloatTensor(p + ".lora_A.weight", {m.r, m.in}, m.a, bf16));
    tensors.push_back(hf::MakeFloatTensor(p + ".lora_B.weight", {m.out, m.r}, m.b, bf16));
  }
  auto st = hf::WriteSafetensors(tensors, dir, 1);
  ASSERT_TRUE(st.ok()) << st;
  // WriteSafetensors names a single file model.safetensors; PEFT's is adapter_model.
  std::filesystem::rename(dir + "/model.safetensors", dir + "/adapter_model.safetensors");
}

inline std::string LoraConfigJson(int r, double alpha, const std::string& more = "") {
  return "{\"peft_type\": \"LORA\", \"r\": " + std::to_string(r) +
         ", \"lora_alpha\": " + std::to_string(alpha) +
         ", \"bias\": \"none\", \"use_dora\": false, \"modules_to_save\": null" +
         (more.empty() ? "" : ", " + more) + "}";
}

// Values as a bf16 file holds them (round to nearest even), for references of bf16 adapters.
inline std::vector<float> Bf16Rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = hf::F32FromBf16(hf::Bf16FromF32(v[i]));
  return out;
}

}  // namespace kvserve::lora::testing
