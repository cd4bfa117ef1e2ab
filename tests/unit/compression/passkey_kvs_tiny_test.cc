// Passkey retrieval on the bundled kvs-tiny model, full attention, through
// compression::EvalPasskey (the path `kvserve eval` and tools/eval_compression.sh use):
// for every prompt in tests/fixtures/passkey_kvs_tiny.json the C++ answer is right exactly
// when PyTorch's was, and the shipped model does retrieve keys from 512 filler tokens back.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "compression/quality_eval.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::compression {
namespace {

using model::testing::ReadFile;

TEST(PasskeyKvsTinyTest, CorrectExactlyWherePyTorchIsAndRetrievesAt512) {
  const std::string root = KVSERVE_SOURCE_DIR;
  const auto fixture = nlohmann::json::parse(ReadFile(root + "/tests/fixtures/passkey_kvs_tiny.json"));
  const auto& items = fixture.at("items");
  ASSERT_GE(items.size(), 20u);
  model::ModelOptions o;
  o.threads = 1;
  o.max_tokens_per_step = 256;
  auto model = model::LlamaModel::Load(root + "/models/kvs-tiny", o);
  ASSERT_TRUE(model.ok()) << model.status();

  PolicyParams full;
  full.kind = config::CompressionPolicyKind::kFull;
  EvalOptions eo;
  eo.chunk = 256;
  std::map<int, std::pair<int, int>> correct_of_filler;  // filler tokens -> (correct, total)
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    const auto prompt = it.at("prompt_ids").get<std::vector<int32_t>>();
    const auto answer = it.at("answer_ids").get<std::vector<int32_t>>();
    auto r = EvalPasskey(**model, nullptr, full, prompt, answer, eo);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->correct, it.at("model_correct").get<bool>())
        << "item " << i << " (filler " << it.at("n_filler") << ", key " << it.at("key") << ")";
    auto& [ok, total] = correct_of_filler[it.at("n_filler").get<int>()];
    ok += r->correct ? 1 : 0;
    ++total;
  }
  for (const auto& [filler, counts] : correct_of_filler) {
    std::cout << "passkey@" << filler << ": " << counts.first << "/" << counts.second << "\n";
  }
  // The model card's claim in miniature: a model that cannot retrieve from 512 tokens back
  // cannot tell compression policies apart, so shipping one must fail here.
  ASSERT_EQ(correct_of_filler.count(512), 1u);
  const auto [ok512, total512] = correct_of_filler.at(512);
  EXPECT_GE(2 * ok512, total512) << "kvs-tiny retrieves fewer than half the keys at 512 filler tokens";
}

}  // namespace
}  // namespace kvserve::compression
