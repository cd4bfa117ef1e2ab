// Compression driven by the real CPU forward pass of the random llama_f32 fixture, the way a
// runner drives it: append slots after each step, feed the observers, run a round when due,
// keep feeding RoPE positions by absolute position while attention reads the compacted
// physical length. `triattention` with a budget covering the sequence is bit-identical to
// `full`; every policy keeps the sequence between its target and target + beta.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "base/clock.h"
#include "compression/calibrator.h"
#include "compression/host_kv_access.h"
#include "compression/policy_factory.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"

namespace kvserve::compression {
namespace {

using config::CompressionPolicyKind;

constexpr int kBlockSize = 8;

class CompressionModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::ModelOptions o;
    o.threads = 1;
    o.max_tokens_per_step = 64;
    auto m = model::LlamaModel::Load(std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32", o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
    std::vector<int32_t> text(700);
    std::mt19937 rng(3);
    for (auto& t : text) t = std::uniform_int_distribution<int32_t>(3, 299)(rng);
    CalibrationOptions co;
    co.max_tokens = 700;
    co.window = 128;
    co.bos = 1;
    auto s = CalibrateModel(*model_, text, co);
    ASSERT_TRUE(s.ok()) << s.status();
    stats_ = new TriAttentionStats(std::move(*s));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete stats_;
  }

  PolicyContext Context() const {
    const model::ModelConfig& c = model_->config();
    return {c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, model_->rope_inv_freq(), stats_, &clock_};
  }

  struct Trace {
    std::vector<int32_t> tokens;        // generated, greedy
    std::vector<std::vector<float>> logits;
    std::vector<RoundResult> rounds;
    int64_t max_phys_len = 0;
    std::vector<std::byte> kv_bytes;    // the sequence's blocks at the end
  };

  // Greedy decoding of `steps` tokens after `prompt`, with `policy` (null: no compression).
  Trace Decode(const std::vector<int32_t>& prompt, int steps, CompressionPolicy* policy) {
    const model::ModelConfig& c = model_->config();
    const int64_t capacity = static_cast<int64_t>(prompt.size()) + steps + 8;
    const int64_t blocks = (capacity + kBlockSize - 1) / kBlockSize;
    model::HostKvBuffer kv(model_->KvLayoutFor(kBlockSize, config::KvDtype::kFp32), blocks);
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    SlotState slots = policy != nullptr ? policy->NewSlotState() : SlotState();
    const ObserverNeeds needs = policy != nullptr ? policy->needs() : ObserverNeeds{};

    model::ForwardObservers obs;
    std::vector<float> mass;
    std::vector<int32_t> step_positions;
    if (needs.attention_mass) {
      mass.resize(static_cast<size_t>(c.num_layers) * c.num_kv_heads * capacity);
      obs.attention_mass = mass;
      obs.mass_stride = capacity;
    }
    std::vector<float> queries;  // [layers][rows][q_size], sized per step

    Trace trace;
    model::BatchBuilder bb(kBlockSize);
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    int64_t next_position = 0;
    std::vector<int32_t> feed = prompt;
    for (int step = 0; step <= steps; ++step) {
      const int64_t phys = slots.size();
      bb.Clear();
      bb.AddSequence(feed, static_cast<int32_t>(next_position), static_cast<int32_t>(phys), table,
                     model::LogitsWanted::kLast);
      step_positions.resize(feed.size());
      std::iota(step_positions.begin(), step_positions.end(), static_cast<int32_t>(next_position));
      const int64_t rows = static_cast<int64_t>(feed.size());
      if (needs.pre_rope_queries) {
        queries.resize(static_cast<size_t>(c.num_layers * rows * c.q_size()));
        obs.pre_rope_queries = queries;
      }
      const absl::Status st = model_->Forward(bb.batch(), kv.view(), logits, &obs);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return trace;
      slots.Append(next_position, static_cast<int64_t>(feed.size()));
      next_position += static_cast<int64_t>(feed.size());
      trace.max_phys_len = std::max(trace.max_phys_len, slots.size());
      if (needs.pre_rope_queries) {
        policy->ObserveQueries(slots, QueryView::FromObservers(queries, rows, c.q_size(), step_positions.data(), 0, rows));
      }
      if (needs.attention_mass) {
        policy->ObserveAttentionMass(slots, MassView::FromObservers(mass, capacity, 1, 0, c.num_kv_heads, slots.size()));
      }
      trace.logits.push_back(logits);
      if (policy != nullptr && policy->Due(slots.size(), next_position)) {
        const model::KvCacheView view = kv.view();
        HostKvAccess access(view.layout, view.layer_data, view.layer_scales);
        RoundInput in{&access, table, slots.size(), &slots, next_position};
        auto r = policy->Run(in);
        EXPECT_TRUE(r.ok()) << r.status();
        if (!r.ok()) return trace;
        trace.rounds.push_back(*r);
      }
      if (step == steps) break;
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      trace.tokens.push_back(next);
      feed = {next};
    }
    const int64_t used = (slots.size() + kBlockSize - 1) / kBlockSize;
    const auto* p = reinterpret_cast<const std::byte*>(kv.view().layer_data[0]);
    trace.kv_bytes.assign(p, p + used * kv.layout().block_elems() * 4);
    // Positions of every row are ascending and in the past.
    if (slots.tracks_slots()) {
      for (int l = 0; l < c.num_layers; ++l)
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const auto pos = slots.positions(l, h);
          for (size_t i = 1; i < pos.size(); ++i) EXPECT_LT(pos[i - 1], pos[i]);
          EXPECT_LT(pos.back(), next_position);
        }
    }
    return trace;
  }

  std::vector<int32_t> Prompt(int n) const {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 37) % 290);
    return p;
  }

  static model::LlamaModel* model_;
  static TriAttentionStats* stats_;
  base::SteadyClock clock_;
};

model::LlamaModel* CompressionModelTest::model_ = nullptr;
TriAttentionStats* CompressionModelTest::stats_ = nullptr;

TEST_F(CompressionModelTest, TriAttentionWithBudgetCoveringTheSequenceIsBitIdenticalToFull) {
  const std::vector<int32_t> prompt = Prompt(20);
  const Trace full = Decode(prompt, 60, nullptr);
  for (CompressionPolicyKind kind : {CompressionPolicyKind::kFull, CompressionPolicyKind::kTriAttention}) {
    PolicyParams p;
    p.kind = kind;
    p.budget = 81;  // the whole sequence (20 + 60 + 1)
    p.divide_length = 16;
    p.prompt_len = 20;
    auto policy = CreatePolicy(p, Context());
    ASSERT_TRUE(policy.ok()) << policy.status();
    const Trace t = Decode(prompt, 60, policy->get());
    EXPECT_TRUE(t.rounds.empty());
    EXPECT_EQ(t.tokens, full.tokens);
    ASSERT_EQ(t.logits.size(), full.logits.size());
    for (size_t i = 0; i < t.logits.size(); ++i) ASSERT_EQ(t.logits[i], full.logits[i]) << "step " << i;
    EXPECT_EQ(t.kv_bytes, full.kv_bytes);
  }
}

struct PolicyCase {
  CompressionPolicyKind kind;
  bool protect_prompt;
  int prompt;
};

class CompressedDecodeTest : public CompressionModelTest, public ::testing::WithParamInterface<PolicyCase> {};

TEST_P(CompressedDecodeTest, StaysWithinBudgetAndKeepsDecoding) {
  const PolicyCase pc = GetParam();
  PolicyParams p;
  p.kind = pc.kind;
  p.budget = 48;
  p.divide_length = 8;
  p.window = 8;
  p.sinks = 4;
  p.prompt_len = pc.prompt;
  p.protect_prompt = pc.protect_prompt;
  auto policy = CreatePolicy(p, Context());
  ASSERT_TRUE(policy.ok()) << policy.status();
  const int steps = 120;
  const Trace t = Decode(Prompt(pc.prompt), steps, policy->get());
  const int64_t target = (*policy)->target_length();
  ASSERT_FALSE(t.rounds.empty());
  // Between rounds the sequence grows from target to target + beta; a prompt longer than
  // the budget may exceed that once, before its first round.
  if (pc.prompt < target) {
    EXPECT_LE(t.max_phys_len, target + p.divide_length);
  }
  std::set<int64_t> gone;
  for (const RoundResult& r : t.rounds) {
    EXPECT_TRUE(r.compacted);
    EXPECT_EQ(r.new_phys_len, target);
    EXPECT_EQ(r.evicted_slots, r.phys_len_before - target);
    EXPECT_EQ(r.blocks_after, (target + kBlockSize - 1) / kBlockSize);
    for (int64_t pos : r.evicted_positions) {
      EXPECT_TRUE(gone.insert(pos).second) << "position " << pos << " evicted twice";
      if (pc.protect_prompt) {
        EXPECT_GE(pos, pc.prompt);
      }
    }
  }
  EXPECT_EQ(static_cast<int>(t.tokens.size()), steps);
  for (const auto& l : t.logits)
    for (float x : l) ASSERT_TRUE(std::isfinite(x));
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CompressedDecodeTest,
    ::testing::Values(PolicyCase{CompressionPolicyKind::kTriAttention, true, 20},
                      PolicyCase{CompressionPolicyKind::kTriAttention, false, 20},
                      PolicyCase{CompressionPolicyKind::kStreamingLlm, true, 20},
                      PolicyCase{CompressionPolicyKind::kH2O, true, 20},
                      PolicyCase{CompressionPolicyKind::kSnapKv, true, 20},
                      PolicyCase{CompressionPolicyKind::kSnapKv, false, 60}),
    [](const auto& info_) {
      const PolicyCase& c = info_.param;
      std::string name;
      switch (c.kind) {
        case CompressionPolicyKind::kTriAttention: name = "triattention"; break;
        case CompressionPolicyKind::kStreamingLlm: name = "streamingllm"; break;
        case CompressionPolicyKind::kH2O: name = "h2o"; break;
        case CompressionPolicyKind::kSnapKv: name = "snapkv"; break;
        default: name = "other"; break;
      }
      return name + (c.protect_prompt ? "_pinned" : "_unpinned") + std::to_string(c.prompt);
    });

}  // namespace
}  // namespace kvserve::compression
