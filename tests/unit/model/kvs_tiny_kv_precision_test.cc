// The KV precisions on REAL activations: the bundled model (models/kvs-tiny) over a real
// text (the first kPromptTokens tokens of tests/fixtures/heldout_long.txt, held out of its
// training data). tests/unit/cache/kv_precision_test.cc measures the same error on random
// activations; trained keys and values are not Gaussian (a few channels dominate, heads
// attend sharply to a handful of tokens), which is what this test adds.
//
// Two measurements, each per KV dtype against fp32 KV:
//
//  1. Attention output per layer, the error of the KV format alone. One fp32 forward pass
//     records every layer's Q (pre-RoPE, through ForwardObservers; rotated here with the
//     model's own RoPE tables) and reads every layer's K (post-RoPE) and V back out of the
//     fp32 paged cache. Per dtype those K/V rows are written into a paged buffer of that
//     dtype through the real write path (kernels/cpu WriteKvRow: quantize on write) and
//     PagedAttention (dequantize inside attention) runs causal attention of all prompt rows
//     over it. Against the fp32 cache's output: max |o_q - o| and, per (row, head),
//     rel = ||o_q - o||_2 / ||o||_2 (max and mean).
//  2. End to end: the whole model run with each KV dtype (errors now compound through the
//     layers). Logits at every prompt position: max |logits_q - logits_fp32| and how many
//     positions keep fp32's greedy (argmax) token.
//
// The asserted bounds are about 2x the measured worst case (docs/kv_precision.md has the
// figures and the command that prints them), so a wrong rounding, a wrong scale or a lost
// bit fails the test while float noise does not. Deterministic: fixed text, threads = 1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "config/fields.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"
#include "tests/unit/model/model_test_util.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::model {
namespace {

using config::KvDtype;
using testing::Argmax;
using testing::ReadFile;

const std::string kModelDir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
constexpr int kPromptTokens = 384;
constexpr int kBlockSize = 16;

// K and V precision of each measured configuration: the shared dtypes, then split pairs and
// int4 (values in groups of kInt4Group along head_dim; keys per channel per block).
struct Precision {
  KvDtype k, v;
};
constexpr Precision kQuantized[] = {{KvDtype::kFp16, KvDtype::kFp16}, {KvDtype::kBf16, KvDtype::kBf16},
                                    {KvDtype::kFp8E4M3, KvDtype::kFp8E4M3}, {KvDtype::kInt8, KvDtype::kInt8},
                                    {KvDtype::kInt4, KvDtype::kInt4},     {KvDtype::kInt8, KvDtype::kInt4},
                                    {KvDtype::kInt4, KvDtype::kInt8},     {KvDtype::kBf16, KvDtype::kInt4},
                                    {KvDtype::kFp16, KvDtype::kInt8}};
constexpr int kInt4Group = 16;

// Bounds, about 2x the measured worst case (docs/kv_precision.md), indexed like kQuantized.
// Measured (g++ 12, x86-64), first kvs-tiny: attention max rel 1.7e-3, 1.4e-2, 0.21, 0.031;
// max |logit diff| 2.7e-3, 1.9e-2, 0.37, 0.039; top-1 agreement 384, 384, 381, 383 of 384.
// Retrained kvs-tiny (passkey retrieval, 2026-12-02): attention 1.8e-3, 9.9e-3, 0.22, 0.044;
// logits 3.4e-3, 1.9e-2, 0.30, 0.083; top-1 384, 384, 382, 383. Long-context kvs-tiny
// (trained to 2048 tokens, 2026-12-03): attention 1.7e-3, 1.7e-2, 0.18, 0.057; logits 3.6e-3,
// 2.7e-2, 0.31, 0.076; top-1 384, 384, 372, 382. The bounds follow the worst model seen.
// Split and int4 (long-context kvs-tiny, 2026-12-04; int4 group 16, keys written one row at
// a time in the attention measurement, so their ranges widen as in decode): attention
// int4 0.36, int8/int4 0.11, int4/int8 0.35, bf16/int4 0.11, fp16/int8 9.6e-3; logits 0.74,
// 0.44, 0.79, 0.49, 0.049; top-1 372, 375, 378, 375, 383 of 384.
constexpr double kMaxAttnRel[] = {3.5e-3, 3.5e-2, 0.4, 0.12, 0.75, 0.25, 0.7, 0.25, 2e-2};  // max: layers, rows, heads
constexpr double kMaxLogitAbs[] = {7e-3, 5.5e-2, 0.75, 0.16, 1.5, 0.9, 1.6, 1.0, 0.1};  // max: positions, vocab
constexpr double kMinTop1Agreement[] = {0.99, 0.99, 0.93, 0.98, 0.93, 0.95, 0.95, 0.95, 0.98};  // of positions

std::string DtypeName(Precision p) {
  return p.k == p.v ? std::string(config::Name(p.k))
                    : std::string(config::Name(p.k)) + "/" + std::string(config::Name(p.v));
}
cache::KvLayout LayoutOf(const LlamaModel& m, Precision p) {
  return cache::WithPrecision(m.KvLayoutFor(kBlockSize, p.k), p.k, p.v, kInt4Group);
}

// One prompt through the model in a single step over a contiguous block table; the logits
// of every row come back. `kv` must hold ceil(ids / block_size) blocks.
std::vector<float> Prefill(LlamaModel& model, const std::vector<int32_t>& ids, HostKvBuffer& kv,
                           const ForwardObservers* observers = nullptr) {
  std::vector<int32_t> table(static_cast<size_t>(kv.num_blocks()));
  std::iota(table.begin(), table.end(), 0);
  BatchBuilder builder(kBlockSize);
  builder.AddSequence(ids, 0, 0, table, LogitsWanted::kAll);
  std::vector<float> logits(ids.size() * static_cast<size_t>(model.config().vocab_size));
  const absl::Status st = model.Forward(builder.batch(), kv.view(), logits, observers);
  EXPECT_TRUE(st.ok()) << st;
  return logits;
}

class KvsTinyKvPrecision : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions opts;
    opts.threads = 1;  // ctest runs binaries in parallel
    opts.max_tokens_per_step = kPromptTokens;
    auto m = LlamaModel::Load(kModelDir, opts);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
    auto tok = tokenizer::LoadTokenizerDir(kModelDir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::string text = ReadFile(std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/heldout_long.txt");
    ids_ = new std::vector<int32_t>((*tok)->encode(text, /*add_special=*/true));
    ASSERT_GE(ids_->size(), static_cast<size_t>(kPromptTokens)) << "heldout_long.txt is too short";
    ids_->resize(kPromptTokens);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ids_;
    model_ = nullptr;
    ids_ = nullptr;
  }

  static int64_t NumBlocks() { return (kPromptTokens + kBlockSize - 1) / kBlockSize; }

  static LlamaModel* model_;
  static std::vector<int32_t>* ids_;
};
LlamaModel* KvsTinyKvPrecision::model_ = nullptr;
std::vector<int32_t>* KvsTinyKvPrecision::ids_ = nullptr;

struct AttnError {
  double max_abs = 0;
  double max_rel = 0;
  double mean_rel = 0;
};

TEST_F(KvsTinyKvPrecision, AttentionOutputErrorOnRealActivationsIsBounded) {
  const ModelConfig& c = model_->config();
  const int t = kPromptTokens, hd = c.head_dim, heads = c.num_heads, kv_heads = c.num_kv_heads;
  const int64_t q_size = c.q_size();

  // fp32 pass: record each layer's pre-RoPE Q; the fp32 cache then holds the exact K/V.
  std::vector<float> all_q(static_cast<size_t>(c.num_layers * t * q_size));
  ForwardObservers obs;
  obs.pre_rope_queries = all_q;
  // The model's own softmax weights, to check below that the Q rebuilt here is the Q it used.
  std::vector<float> model_mass(static_cast<size_t>(c.num_layers) * kv_heads * t);
  obs.attention_mass = model_mass;
  obs.mass_stride = t;
  HostKvBuffer ref_kv(model_->KvLayoutFor(kBlockSize, KvDtype::kFp32), NumBlocks());
  Prefill(*model_, *ids_, ref_kv, &obs);
  std::vector<std::vector<float>> q(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    q[static_cast<size_t>(l)].assign(all_q.begin() + l * t * q_size, all_q.begin() + (l + 1) * t * q_size);
  }

  // Rotate Q exactly as the forward pass does (same inverse frequencies, positions 0..t-1).
  std::vector<int32_t> positions(static_cast<size_t>(t));
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> cos_sin(static_cast<size_t>(t) * hd);
  kernels::cpu::RopeCosSin(positions.data(), t, model_->rope_inv_freq().data(), hd / 2, cos_sin.data());
  for (auto& layer_q : q) {
    ASSERT_EQ(layer_q.size(), static_cast<size_t>(t * q_size)) << "pre_rope_queries not called for a layer";
    kernels::cpu::ApplyRope(layer_q.data(), t, heads, hd, q_size, cos_sin.data());
  }

  // One sequence of t rows over a contiguous table: row j attends [0, j], as in the model.
  std::vector<int32_t> table(static_cast<size_t>(NumBlocks()));
  std::iota(table.begin(), table.end(), 0);
  const int32_t seq_starts[] = {0, t};
  const int32_t kv_lens[] = {t};
  const int32_t table_offsets[] = {0, static_cast<int32_t>(table.size())};
  const kernels::cpu::PagedSeqs seqs{1, seq_starts, kv_lens, table_offsets, table.data()};
  const int threads = kernels::cpu::SetComputeThreads(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto attend = [&](HostKvBuffer& kv, int layer, float* lse) {
    const KvCacheView view = kv.view();
    std::vector<float> ws(kernels::cpu::PagedAttentionWorkspaceFloats(view.layout, heads, threads));
    std::vector<float> out(static_cast<size_t>(t * q_size));
    kernels::cpu::PagedAttention(view.layout, view.layer_data[layer],
                                 view.layout.has_scales() ? view.layer_scales[layer] : nullptr, seqs,
                                 q[static_cast<size_t>(layer)].data(), q_size, heads, scale, out.data(), q_size,
                                 lse, ws.data(), ws.size());
    return out;
  };

  const KvCacheView ref_view = ref_kv.view();
  std::vector<float> refs;  // [layer][t][q_size]: the fp32 attention outputs
  for (int layer = 0; layer < c.num_layers; ++layer) {
    std::vector<float> lse(static_cast<size_t>(t) * heads);
    const std::vector<float> out = attend(ref_kv, layer, lse.data());
    refs.insert(refs.end(), out.begin(), out.end());
    std::vector<float> mass(static_cast<size_t>(kv_heads) * t, 0.0f);
    std::vector<float> ws(kernels::cpu::PagedAttentionWorkspaceFloats(ref_view.layout, heads, threads));
    kernels::cpu::AttentionMass(ref_view.layout, ref_view.layer_data[layer], nullptr, seqs,
                                q[static_cast<size_t>(layer)].data(), q_size, heads, scale, lse.data(), mass.data(),
                                t, ws.data(), ws.size());
    const double mass_diff = testing::MaxAbsDiff(
        mass.data(), model_mass.data() + static_cast<size_t>(layer) * kv_heads * t, mass.size());
    ASSERT_LE(mass_diff, 1e-3) << "layer " << layer << ": the rebuilt Q does not reproduce the model's attention";
  }

  std::printf("attention output vs fp32 KV, kvs-tiny, %d real tokens, per layer:\n", t);
  std::printf("%-14s %5s %12s %12s %12s\n", "dtype", "layer", "max_abs", "max_rel", "mean_rel");
  for (size_t di = 0; di < std::size(kQuantized); ++di) {
    const Precision dtype = kQuantized[di];
    HostKvBuffer kv(LayoutOf(*model_, dtype), NumBlocks());
    const KvCacheView view = kv.view();
    AttnError worst;
    for (int layer = 0; layer < c.num_layers; ++layer) {
      // The real K/V of this layer, quantized on write into the dtype's paged buffer.
      std::vector<float> row(static_cast<size_t>(hd));
      for (int pos = 0; pos < t; ++pos) {
        const int64_t block = pos / kBlockSize;
        const int offset = pos % kBlockSize;
        for (int kv_idx = 0; kv_idx < 2; ++kv_idx) {
          for (int h = 0; h < kv_heads; ++h) {
            kernels::cpu::ReadKvRow(ref_view.layout, ref_view.layer_data[layer], nullptr, block, kv_idx, h, offset,
                                    row.data());
            kernels::cpu::WriteKvRow(view.layout, view.layer_data[layer],
                                     view.layout.has_scales() ? view.layer_scales[layer] : nullptr, block, kv_idx,
                                     h, offset, row.data());
          }
        }
      }
      const float* ref = refs.data() + static_cast<size_t>(layer) * t * q_size;
      const std::vector<float> got = attend(kv, layer, nullptr);
      AttnError e;
      for (int r = 0; r < t; ++r) {
        for (int h = 0; h < heads; ++h) {
          const size_t base = static_cast<size_t>(r) * q_size + static_cast<size_t>(h) * hd;
          double err2 = 0, ref2 = 0;
          for (int i = 0; i < hd; ++i) {
            const double d = static_cast<double>(got[base + i]) - ref[base + i];
            e.max_abs = std::max(e.max_abs, std::abs(d));
            err2 += d * d;
            ref2 += static_cast<double>(ref[base + i]) * ref[base + i];
          }
          const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
          e.max_rel = std::max(e.max_rel, rel);
          e.mean_rel += rel;
        }
      }
      e.mean_rel /= static_cast<double>(t) * heads;
      std::printf("%-14s %5d %12.3e %12.3e %12.3e\n", DtypeName(dtype).c_str(), layer, e.max_abs, e.max_rel,
                  e.mean_rel);
      worst.max_abs = std::max(worst.max_abs, e.max_abs);
      worst.max_rel = std::max(worst.max_rel, e.max_rel);
      worst.mean_rel = std::max(worst.mean_rel, e.mean_rel);
    }
    std::printf("%-14s %5s %12.3e %12.3e %12.3e\n", DtypeName(dtype).c_str(), "all", worst.max_abs, worst.max_rel,
                worst.mean_rel);
    EXPECT_GT(worst.max_rel, 0.0) << DtypeName(dtype) << ": no error at all means the dtype was not applied";
    EXPECT_LE(worst.max_rel, kMaxAttnRel[di]) << DtypeName(dtype);
  }
}

TEST_F(KvsTinyKvPrecision, LogitsWithQuantizedKvStayCloseToFp32) {
  const int vocab = model_->config().vocab_size;
  HostKvBuffer ref_kv(model_->KvLayoutFor(kBlockSize, KvDtype::kFp32), NumBlocks());
  const std::vector<float> ref = Prefill(*model_, *ids_, ref_kv);
  double max_logit = 0;
  for (float x : ref) max_logit = std::max(max_logit, std::abs(static_cast<double>(x)));

  std::printf("end to end vs fp32 KV, kvs-tiny, %d real tokens (max |logit| %.2f):\n", kPromptTokens, max_logit);
  std::printf("%-14s %10s %14s %14s\n", "dtype", "bytes/tok", "max_abs_logit", "top1_agree");
  for (size_t di = 0; di < std::size(kQuantized); ++di) {
    const Precision dtype = kQuantized[di];
    HostKvBuffer kv(LayoutOf(*model_, dtype), NumBlocks());
    const std::vector<float> got = Prefill(*model_, *ids_, kv);
    double max_abs = 0;
    int agree = 0;
    for (int pos = 0; pos < kPromptTokens; ++pos) {
      const float* g = got.data() + static_cast<size_t>(pos) * vocab;
      const float* r = ref.data() + static_cast<size_t>(pos) * vocab;
      max_abs = std::max(max_abs, testing::MaxAbsDiff(g, r, static_cast<size_t>(vocab)));
      agree += Argmax(g, vocab) == Argmax(r, vocab) ? 1 : 0;
    }
    const double agreement = static_cast<double>(agree) / kPromptTokens;
    std::printf("%-14s %10.1f %14.3e %8d/%d\n", DtypeName(dtype).c_str(), kv.layout().bytes_per_token(), max_abs,
                agree, kPromptTokens);
    EXPECT_GT(max_abs, 0.0) << DtypeName(dtype) << ": identical logits mean the dtype was not applied";
    EXPECT_LE(max_abs, kMaxLogitAbs[di]) << DtypeName(dtype);
    EXPECT_GE(agreement, kMinTop1Agreement[di]) << DtypeName(dtype) << ": " << agree << "/" << kPromptTokens;
  }
}

}  // namespace
}  // namespace kvserve::model
