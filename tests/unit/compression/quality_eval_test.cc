// compression/quality_eval on the bundled kvs-tiny model with its shipped statistics:
// perplexity without compression equals a direct forward pass, a budget covering the text
// changes nothing, a small budget bounds the slots held, and passkey decoding is greedy.
#include "compression/quality_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/clock.h"
#include "compression/triattention_stats.h"
#include "model/batch_builder.h"
#include "model/llama_model.h"

namespace kvserve::compression {
namespace {

using config::CompressionPolicyKind;

class QualityEvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
    model::ModelOptions o;
    o.threads = 1;
    o.max_tokens_per_step = 400;
    auto m = model::LlamaModel::Load(dir, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
    auto s = LoadStats(dir + "/triattention_stats.bin");
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

  static std::vector<int32_t> Text(int n) {
    std::vector<int32_t> t{1};
    for (int i = 1; i < n; ++i) t.push_back(261 + (i * 37 + (i / 7) * 11) % 1700);
    return t;
  }

  static PolicyParams Params(CompressionPolicyKind kind, int64_t budget, int64_t slack = 16) {
    PolicyParams p;
    p.kind = kind;
    p.budget = budget;
    p.divide_length = slack;
    p.protect_prompt = false;
    p.prompt_len = 1;
    p.window = kind == CompressionPolicyKind::kStreamingLlm ? budget - 4 : 8;
    return p;
  }

  static model::LlamaModel* model_;
  static TriAttentionStats* stats_;
  base::SteadyClock clock_;
};
model::LlamaModel* QualityEvalTest::model_ = nullptr;
TriAttentionStats* QualityEvalTest::stats_ = nullptr;

TEST_F(QualityEvalTest, FullPerplexityEqualsOneForwardPass) {
  const std::vector<int32_t> text = Text(300);
  EvalOptions eo;
  eo.chunk = 32;
  auto r = EvalPerplexity(*model_, nullptr, Params(CompressionPolicyKind::kFull, 0), text, eo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scored, 299);
  EXPECT_EQ(r->stats.rounds, 0);
  EXPECT_EQ(r->stats.peak_kv_tokens, 299);

  // Reference: the whole text in one step over a contiguous block table.
  const cache::KvLayout layout = model_->KvLayoutFor(16, config::KvDtype::kFp32);
  const int blocks = 300 / 16 + 2;
  std::vector<std::vector<std::byte>> data(layout.num_layers);
  std::vector<std::byte*> ptrs;
  for (auto& d : data) {
    d.resize(static_cast<size_t>(blocks) * layout.block_elems() * layout.elem_bytes());
    ptrs.push_back(d.data());
  }
  const int n = 299;
  std::vector<int32_t> table;
  for (int b = 1; b < blocks; ++b) table.push_back(b);  // blocks 1.. (0 is null)
  model::BatchBuilder builder(16);
  builder.AddSequence(std::span<const int32_t>(text.data(), n), 0, 0, table, model::LogitsWanted::kAll);
  const model::ForwardBatch batch = builder.batch();
  model::KvCacheView view;
  view.layout = layout;
  view.num_blocks = blocks;
  view.layer_data = ptrs;
  const int vocab = model_->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(n) * vocab);
  ASSERT_TRUE(model_->Forward(batch, view, logits).ok());
  double nll = 0.0;
  for (int i = 0; i < n; ++i) {
    const float* l = logits.data() + static_cast<size_t>(i) * vocab;
    double mx = l[0], sum = 0.0;
    for (int v = 0; v < vocab; ++v) mx = std::max<double>(mx, l[v]);
    for (int v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
    nll -= l[text[i + 1]] - mx - std::log(sum);
  }
  EXPECT_NEAR(r->nll, nll, 1e-6 * nll);
}

TEST_F(QualityEvalTest, BudgetCoveringTheTextChangesNothing) {
  const std::vector<int32_t> text = Text(260);
  EvalOptions eo;
  eo.chunk = 16;
  const PolicyContext ctx = Context();
  auto full = EvalPerplexity(*model_, &ctx, Params(CompressionPolicyKind::kFull, 0), text, eo);
  ASSERT_TRUE(full.ok());
  for (auto kind : {CompressionPolicyKind::kTriAttention, CompressionPolicyKind::kStreamingLlm,
                    CompressionPolicyKind::kSnapKv, CompressionPolicyKind::kH2O}) {
    auto r = EvalPerplexity(*model_, &ctx, Params(kind, 300), text, eo);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->nll, full->nll) << static_cast<int>(kind);
    EXPECT_EQ(r->stats.rounds, 0);
  }
}

TEST_F(QualityEvalTest, SmallBudgetBoundsTheSlotsHeld) {
  const std::vector<int32_t> text = Text(400);
  EvalOptions eo;
  eo.chunk = 16;
  const PolicyContext ctx = Context();
  auto full = EvalPerplexity(*model_, &ctx, Params(CompressionPolicyKind::kFull, 0), text, eo);
  ASSERT_TRUE(full.ok());
  for (auto kind : {CompressionPolicyKind::kTriAttention, CompressionPolicyKind::kStreamingLlm,
                    CompressionPolicyKind::kH2O}) {
    auto r = EvalPerplexity(*model_, &ctx, Params(kind, 64, 16), text, eo);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->stats.rounds, 0);
    EXPECT_LE(r->stats.peak_kv_tokens, 64 + 16 + 16);
    EXPECT_GE(r->stats.compression_ratio(), 4.0);
    EXPECT_NE(r->nll, full->nll) << "evicting most of the text must change the scores";
    EXPECT_LT(r->perplexity(), 3.0 * full->perplexity()) << "but not into noise";
  }
}

TEST_F(QualityEvalTest, PasskeyAnswersGreedilyAndChecksEveryToken) {
  const std::vector<int32_t> prompt = Text(120);
  EvalOptions eo;
  eo.chunk = 32;
  auto probe = EvalPasskey(*model_, nullptr, Params(CompressionPolicyKind::kFull, 0), prompt,
                           std::vector<int32_t>{5, 6, 7}, eo);
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(probe->output.size(), 3u);
  // The model's own greedy continuation is, by construction, a correct answer.
  auto again = EvalPasskey(*model_, nullptr, Params(CompressionPolicyKind::kFull, 0), prompt, probe->output, eo);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->correct);
  std::vector<int32_t> wrong = probe->output;
  wrong.back() = (wrong.back() + 1) % model_->config().vocab_size;
  auto miss = EvalPasskey(*model_, nullptr, Params(CompressionPolicyKind::kFull, 0), prompt, wrong, eo);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->correct);
  EvalOptions too_big;
  too_big.chunk = 100000;
  EXPECT_EQ(EvalPasskey(*model_, nullptr, Params(CompressionPolicyKind::kFull, 0), prompt, probe->output, too_big)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The key-held diagnosis reports what the policy kept, not a constant: full holds every
// watched position; streamingllm (4 sinks + a recent window) holds the sinks and the recent
// tokens but none of the middle.
TEST_F(QualityEvalTest, DecodePasskeyReportsWhichWatchedPositionsAreHeld) {
  const std::vector<int32_t> text = Text(200);
  const std::vector<int32_t> prompt(text.begin(), text.begin() + 1);
  const std::vector<int32_t> forced(text.begin() + 1, text.end());
  const std::vector<int32_t> answer{5, 6};
  EvalOptions eo;
  eo.chunk = 16;
  const PolicyContext ctx = Context();
  const std::vector<int32_t> middle{60, 61, 62, 63};
  const std::vector<int32_t> recent{196, 197, 198, 199};
  const std::vector<int32_t> sinks{1, 2, 3};
  auto full = EvalDecodePasskey(*model_, &ctx, Params(CompressionPolicyKind::kFull, 0), prompt, forced, answer, eo, middle);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->watched_held, 1.0);
  PolicyParams sl = Params(CompressionPolicyKind::kStreamingLlm, 64, 16);
  sl.protect_prompt = true;
  for (const auto& [watch, expect] : {std::pair{middle, 0.0}, std::pair{recent, 1.0}, std::pair{sinks, 1.0}}) {
    auto r = EvalDecodePasskey(*model_, &ctx, sl, prompt, forced, answer, eo, watch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->stats.rounds, 0);
    EXPECT_EQ(r->watched_held, expect) << "watching position " << watch.front();
  }
  // Half watched in the middle (evicted) and half recent (held).
  std::vector<int32_t> mixed = middle;
  mixed.insert(mixed.end(), recent.begin(), recent.end());
  auto r = EvalDecodePasskey(*model_, &ctx, sl, prompt, forced, answer, eo, mixed);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->watched_held, 0.5);
}

// Demotion in the evaluation (--demote): tokens a plain round would evict stay in int8 / int4
// tiers, so more of the text is held (key held counts them), the scores move less than with
// eviction alone, and the peak bytes count the tiers' blocks from the first token.
TEST_F(QualityEvalTest, DemotionKeepsTokensInTiersAndCountsTheirBytes) {
  const std::vector<int32_t> text = Text(200);
  const std::vector<int32_t> prompt(text.begin(), text.begin() + 1);
  const std::vector<int32_t> forced(text.begin() + 1, text.end());
  EvalOptions eo;
  eo.chunk = 16;
  eo.demote_dtypes = {config::KvDtype::kInt8, config::KvDtype::kInt4};
  const PolicyContext ctx = Context();
  PolicyParams tri = Params(CompressionPolicyKind::kTriAttention, 64, 16);
  tri.protect_prompt = true;
  PolicyParams demote = tri;
  demote.demote_tokens = {32, 64};
  auto full = EvalDecodePerplexity(*model_, &ctx, Params(CompressionPolicyKind::kFull, 0), prompt, forced, eo);
  auto evict = EvalDecodePerplexity(*model_, &ctx, tri, prompt, forced, eo);
  auto tiered = EvalDecodePerplexity(*model_, &ctx, demote, prompt, forced, eo);
  ASSERT_TRUE(full.ok() && evict.ok() && tiered.ok()) << tiered.status();
  EXPECT_EQ(tiered->stats.rounds, evict->stats.rounds);
  EXPECT_EQ(tiered->stats.peak_kv_tokens, evict->stats.peak_kv_tokens);
  // int8 tier: 2 blocks, int4 tier: 4 blocks (model geometry, block 16).
  const cache::KvLayout pool = model_->KvLayoutFor(16, config::KvDtype::kFp32);
  const int64_t tiers = 2 * static_cast<int64_t>(cache::WithPrecision(pool, config::KvDtype::kInt8,
                                                                        config::KvDtype::kInt8, 32).bytes_per_block()) +
                        4 * static_cast<int64_t>(cache::WithPrecision(pool, config::KvDtype::kInt4,
                                                                        config::KvDtype::kInt4, 32).bytes_per_block());
  EXPECT_EQ(tiered->stats.peak_kv_bytes, evict->stats.peak_kv_bytes + tiers);
  EXPECT_LT(std::abs(tiered->nll - full->nll), std::abs(evict->nll - full->nll));
  // Positions 60..63 are evicted by eviction alone in every row; with tiers some rows hold them.
  const std::vector<int32_t> answer{5};
  const std::vector<int32_t> middle{60, 61, 62, 63};
  auto pk_evict = EvalDecodePasskey(*model_, &ctx, tri, prompt, forced, answer, eo, middle);
  auto pk_tiered = EvalDecodePasskey(*model_, &ctx, demote, prompt, forced, answer, eo, middle);
  ASSERT_TRUE(pk_evict.ok() && pk_tiered.ok());
  EXPECT_GT(pk_tiered->watched_held, pk_evict->watched_held);
  // A schedule without tiers to put it in is refused.
  EvalOptions no_tiers = eo;
  no_tiers.demote_dtypes.clear();
  EXPECT_FALSE(EvalDecodePerplexity(*model_, &ctx, demote, prompt, forced, no_tiers).ok());
}

}  // namespace
}  // namespace kvserve::compression
