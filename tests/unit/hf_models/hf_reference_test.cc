// The float64 reference forward (tests/support/hf_models/reference_forward.h):
//  * agreement with kvserve's CPU forward (model::LlamaModel) on the architectures kvserve
//    runs today (Llama with each rope scaling it knows, Qwen2/3, Mistral without a window,
//    Phi-3, Mixtral, Qwen3-MoE) to 1e-4 in log-probability, which checks the fixture writer
//    and the reference together;
//  * properties that fail when a branch is wrong: a window >= the sequence equals full
//    attention while a short one reaches back exactly layers × (window − 1) tokens; huge
//    soft-caps equal none; scalings with factor 1 equal plain RoPE; MoE with one expert
//    equals the dense model holding the same weights; MXFP4 equals its dequantised bf16.
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/support/hf_models/safetensors_writer.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {
namespace {

using nlohmann::json;

constexpr double kLogprobTol = 1e-4;

Reference MustRun(const FixtureSpec& spec, const std::vector<int32_t>& ids,
                  const std::string& tag) {
  FixtureDir dir(tag);
  auto st = WriteRandomCheckpoint(spec, dir.path());
  EXPECT_TRUE(st.ok()) << st;
  auto r = RunReference(dir.path(), ids);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : Reference{};
}

// Largest |a − b| over positions [from, to) of two references' logits.
double MaxDiff(const Reference& a, const Reference& b, size_t from, size_t to) {
  double m = 0;
  for (size_t t = from; t < to; ++t) {
    const auto ra = a.Row(t), rb = b.Row(t);
    for (size_t v = 0; v < ra.size(); ++v) m = std::max(m, std::abs(ra[v] - rb[v]));
  }
  return m;
}
double MaxDiff(const Reference& a, const Reference& b) {
  return MaxDiff(a, b, 0, a.logits.size() / a.vocab_size);
}

// ---------------------------------------------------------------------------------------
// Agreement with kvserve's CPU forward.

using AgreementCase = AgreementFixture;  // hf_test_util.h

class KvserveAgreementTest : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(KvserveAgreementTest, LogprobsMatchTheCpuForward) {
  const FixtureSpec& spec = GetParam().spec;
  FixtureDir dir(GetParam().name);
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  model::ModelOptions opts;
  opts.threads = 1;
  opts.max_tokens_per_step = 128;
  opts.max_context = GetParam().max_context;
  auto m = model::LlamaModel::Load(dir.path(), opts);
  ASSERT_TRUE(m.ok()) << m.status();
  auto ref_model = ReferenceModel::Load(dir.path());
  ASSERT_TRUE(ref_model.ok()) << ref_model.status();
  const int vocab = spec.vocab_size;
  double worst = 0;
  for (int salt = 0; salt < 2; ++salt) {
    const std::vector<int32_t> ids = TestIds(40, vocab, salt);
    model::testing::PagedSession session(**m, 4, config::KvDtype::kFp32, 64);
    const int s = session.NewSequence();
    const std::vector<float> got = session.Step({{s, ids}})[0];
    auto ref = (*ref_model)->Forward(ids);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (double d : PositionLogprobDiffs(got, *ref, ids.size(), vocab)) worst = std::max(worst, d);
  }
  RecordProperty("max_logprob_diff", std::to_string(worst));
  std::printf("[ agreement ] %s: max |logprob diff| = %.3g\n", GetParam().name.c_str(), worst);
  EXPECT_LE(worst, kLogprobTol);

  // Greedy continuations agree too (argmax is robust at these margins).
  const std::vector<int32_t> prompt = TestIds(GetParam().greedy_prompt, vocab, 3);
  auto want = Greedy(dir.path(), prompt, 8);
  ASSERT_TRUE(want.ok()) << want.status();
  model::testing::PagedSession session(**m, 4, config::KvDtype::kFp32, 64);
  const int s = session.NewSequence();
  std::vector<float> logits = session.Step({{s, prompt}})[0];
  std::vector<int32_t> got;
  for (int i = 0; i < 8; ++i) {
    const int32_t next = model::testing::Argmax(logits.data() + logits.size() - vocab, vocab);
    got.push_back(next);
    logits = session.Step({{s, {next}}})[0];
  }
  EXPECT_EQ(got, *want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvserveAgreementTest, ::testing::ValuesIn(AgreementFixtures()),
                         [](const auto& p) { return p.param.name; });

// ---------------------------------------------------------------------------------------
// Properties of the reference itself.

TEST(HfReference, EveryPresetRunsAndGivesFiniteNonDegenerateLogits) {
  for (const auto& [name, spec] : AllPresets()) {
    SCOPED_TRACE(name);
    const Reference r = MustRun(spec, TestIds(24, spec.vocab_size), name);
    ASSERT_EQ(r.logits.size(), 24u * static_cast<size_t>(spec.vocab_size));
    double lo = 1e300, hi = -1e300;
    for (double v : r.logits) {
      ASSERT_TRUE(std::isfinite(v));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GT(hi - lo, 0.5) << "logits nearly constant";
    // Not a delta either: the top token keeps well under all the mass.
    const std::vector<double> lp = r.LogProbs(23);
    EXPECT_LT(*std::max_element(lp.begin(), lp.end()), std::log(0.9));
  }
}

TEST(HfReference, PrefixForwardsAgreeWhereTheDefinitionIsCausal) {
  for (const auto& [name, spec] : AllPresets()) {
    if (spec.rope_scaling.type == "longrope" || spec.rope_scaling.type == "dynamic") continue;
    SCOPED_TRACE(name);
    FixtureDir dir(name);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    const std::vector<int32_t> ids = TestIds(20, spec.vocab_size);
    auto full = RunReference(dir.path(), ids);
    auto prefix = RunReference(dir.path(), std::span(ids).first(11));
    ASSERT_TRUE(full.ok() && prefix.ok());
    EXPECT_LE(MaxDiff(*full, *prefix, 0, 11), 1e-12);
  }
}

TEST(HfReference, GreedyIsTheArgmaxOfSuccessiveForwards) {
  FixtureDir dir("greedy");
  ASSERT_TRUE(WriteRandomCheckpoint(Gemma2Preset(), dir.path()).ok());
  std::vector<int32_t> seq = TestIds(5, 256);
  auto g = Greedy(dir.path(), seq, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 4u);
  for (int32_t tok : *g) {
    auto r = RunReference(dir.path(), seq);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->Argmax(seq.size() - 1), tok);
    seq.push_back(tok);
  }
}

TEST(HfReference, WindowAtLeastTheSequenceIsFullAttention) {
  const std::vector<int32_t> ids = TestIds(24, 256);
  const Reference full = MustRun(MistralPreset(0), ids, "full");
  EXPECT_LE(MaxDiff(MustRun(MistralPreset(24), ids, "w24"), full), 1e-12);
  EXPECT_LE(MaxDiff(MustRun(MistralPreset(100), ids, "w100"), full), 1e-12);
  const Reference w23 = MustRun(MistralPreset(23), ids, "w23");
  EXPECT_LE(MaxDiff(w23, full, 0, 23), 1e-12);  // the window only bites at position 23
  EXPECT_GT(MaxDiff(w23, full, 23, 24), 1e-6);

  // gpt-oss: the even layers' window of 8 vs layer_types all full.
  FixtureSpec g = GptOssPreset();
  g.sliding_window = 24;
  const Reference wide = MustRun(g, ids, "gptoss_wide");
  g.layer_types = {"full_attention", "full_attention"};
  EXPECT_LE(MaxDiff(MustRun(g, ids, "gptoss_full"), wide), 1e-12);
  EXPECT_GT(MaxDiff(MustRun(GptOssPreset(), ids, "gptoss_w8"), wide), 1e-6);

  // Gemma 3: with the local base equal to the global one and no scaling, a wide window is
  // the all-global model.
  FixtureSpec m = Gemma3Preset();
  m.rope_scaling = {};
  m.rope_local_base_freq = m.rope_theta;
  m.sliding_window = 64;
  const Reference g3 = MustRun(m, ids, "gemma3_wide");
  m.layer_types.assign(6, "full_attention");
  EXPECT_LE(MaxDiff(MustRun(m, ids, "gemma3_full"), g3), 1e-12);
  // ...but the real local base changes the local layers.
  m = Gemma3Preset();
  m.sliding_window = 64;
  EXPECT_GT(MaxDiff(MustRun(m, ids, "gemma3_localbase"), g3), 1e-6);
}

// Qwen2/3: the declared window applies only with use_sliding_window and only from layer
// max_window_layers on.
TEST(HfReference, QwenWindowNeedsBothGates) {
  const std::vector<int32_t> ids = TestIds(24, 256);
  FixtureSpec s = Qwen3Preset();
  s.sliding_window = 4;
  s.use_sliding_window = false;
  s.max_window_layers = 0;
  const Reference off = MustRun(s, ids, "off");
  s.use_sliding_window = true;
  s.max_window_layers = 2;  // = num_hidden_layers: no layer slides
  EXPECT_LE(MaxDiff(MustRun(s, ids, "none_from_2"), off), 1e-12);
  s.max_window_layers = 1;  // layer 1 slides
  const Reference one = MustRun(s, ids, "from_1");
  EXPECT_GT(MaxDiff(one, off), 1e-6);
  s.max_window_layers = 0;  // both slide
  EXPECT_GT(MaxDiff(MustRun(s, ids, "from_0"), one), 1e-6);
}

// With L layers of window W (W keys including the query's own) position t sees tokens
// back to t − L·(W − 1): one more or one fewer key per layer moves that edge.
TEST(HfReference, SlidingWindowReachesBackExactlyLayersTimesWindowMinusOne) {
  FixtureSpec s = MistralPreset(4);  // 2 layers: reach 6
  std::vector<int32_t> a = TestIds(16, 256);
  std::vector<int32_t> b = a;
  b[0] = (b[0] + 1) % 256;
  const Reference ra = MustRun(s, a, "a"), rb = MustRun(s, b, "b");
  EXPECT_GT(MaxDiff(ra, rb, 6, 7), 1e-9) << "position 6 must still see token 0";
  EXPECT_LE(MaxDiff(ra, rb, 7, 16), 1e-12) << "position 7 and later must not";
}

TEST(HfReference, HugeSoftcapsEqualNone) {
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = Gemma2Preset();
  const Reference capped = MustRun(s, ids, "capped");
  s.attn_logit_softcapping = 1e9;
  s.final_logit_softcapping = 1e9;
  const Reference huge = MustRun(s, ids, "huge");
  s.attn_logit_softcapping.reset();
  s.final_logit_softcapping.reset();
  const Reference none = MustRun(s, ids, "none");
  EXPECT_LE(MaxDiff(huge, none), 1e-9);
  EXPECT_GT(MaxDiff(capped, none), 1e-6);
  // The final cap bounds every logit.
  FixtureSpec tight = Gemma2Preset();
  tight.final_logit_softcapping = 0.5;
  for (double v : MustRun(tight, ids, "tight").logits) ASSERT_LE(std::abs(v), 0.5);
}

TEST(HfReference, GemmaNormaliserIsRoundedToTheCheckpointDtype) {
  FixtureSpec s = Gemma2Preset();
  s.hidden_size = 96;  // sqrt(96) = 9.7980 is not a bf16 value: 9.8125 is the nearest
  for (WeightDtype d : {WeightDtype::kF32, WeightDtype::kBf16}) {
    s.dtype = d;
    auto c = ParseReferenceConfig(ConfigJson(s));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->embed_scale,
              d == WeightDtype::kBf16 ? 9.8125 : static_cast<double>(std::sqrt(96.0f)));
  }
}

TEST(HfReference, ScalingsWithFactorOneArePlainRope) {
  const std::vector<int32_t> ids = TestIds(40, 256);
  FixtureSpec s = LlamaPreset();
  s.max_position_embeddings = 32;
  const Reference plain = MustRun(s, ids, "plain");
  // (Not dynamic: with factor 1 its base still grows as (L / max_position)^(d / (d − 2)) once
  // L > max_position; DynamicNtkDependsOnTheForwardLength covers it.)
  for (const RopeScalingSpec& r : {LinearRope(1.0), Llama3Rope(1.0, 32), YarnRope(1.0, 32)}) {
    SCOPED_TRACE(r.type);
    s.rope_scaling = r;
    EXPECT_LE(MaxDiff(MustRun(s, ids, r.type), plain), 1e-10);
  }
  // And a real factor changes them (the sequence of 40 exceeds max_position 32 for dynamic).
  for (const RopeScalingSpec& r :
       {LinearRope(4.0), DynamicRope(4.0), Llama3Rope(8.0, 16), YarnRope(4.0, 8)}) {
    SCOPED_TRACE(r.type);
    s.rope_scaling = r;
    EXPECT_GT(MaxDiff(MustRun(s, ids, r.type + "_4"), plain), 1e-6);
  }
}

TEST(HfReference, DynamicNtkDependsOnTheForwardLength) {
  FixtureSpec s = LlamaPreset();
  s.max_position_embeddings = 16;
  s.rope_scaling = DynamicRope(4.0);
  const std::vector<int32_t> ids = TestIds(24, 256);
  FixtureDir dir("dyn");
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  FixtureSpec p = s;
  p.rope_scaling = {};
  FixtureDir plain_dir("plain");
  ASSERT_TRUE(WriteRandomCheckpoint(p, plain_dir.path()).ok());
  auto short_dyn = RunReference(dir.path(), std::span(ids).first(16));
  auto short_plain = RunReference(plain_dir.path(), std::span(ids).first(16));
  auto long_dyn = RunReference(dir.path(), ids);
  ASSERT_TRUE(short_dyn.ok() && short_plain.ok() && long_dyn.ok());
  EXPECT_LE(MaxDiff(*short_dyn, *short_plain), 1e-12);     // L <= max_position: the base is kept
  EXPECT_GT(MaxDiff(*long_dyn, *short_dyn, 0, 16), 1e-6);  // L = 24: a larger base everywhere
}

TEST(HfReference, YarnAttentionFactorVariants) {
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = YarnLlama();
  const Reference dflt = MustRun(s, ids, "default_mscale");  // 0.1 ln 4 + 1
  s.rope_scaling.attention_factor = 0.1 * std::log(4.0) + 1.0;
  EXPECT_LE(MaxDiff(MustRun(s, ids, "explicit_same"), dflt), 1e-12);
  s.rope_scaling.attention_factor = 1.0;
  const Reference one = MustRun(s, ids, "explicit_one");
  EXPECT_GT(MaxDiff(one, dflt), 1e-6);
  // mscale == mscale_all_dim: the DeepSeek ratio is 1.
  s.rope_scaling.attention_factor.reset();
  s.rope_scaling.mscale = 0.707;
  s.rope_scaling.mscale_all_dim = 0.707;
  EXPECT_LE(MaxDiff(MustRun(s, ids, "mscale_ratio"), one), 1e-12);
  // truncate false moves the ramp ends off integers: different frequencies.
  s = YarnLlama();
  s.rope_scaling.truncate = false;
  EXPECT_GT(MaxDiff(MustRun(s, ids, "no_truncate"), dflt), 1e-9);
}

TEST(HfReference, LongropeSwitchesFactorsPastTheOriginalContext) {
  FixtureSpec s = Phi3Preset();  // L0 16
  // Short factors 1 and attention factor 1: a forward of <= 16 tokens is plain RoPE.
  s.rope_scaling.short_factor.assign(8, 1.0);
  s.rope_scaling.attention_factor = 1.0;
  FixtureSpec p = s;
  p.rope_scaling = {};
  const std::vector<int32_t> ids = TestIds(24, 256);
  FixtureDir dir("longrope"), plain_dir("plain");
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  ASSERT_TRUE(WriteRandomCheckpoint(p, plain_dir.path()).ok());
  auto a = RunReference(dir.path(), std::span(ids).first(16));
  auto b = RunReference(plain_dir.path(), std::span(ids).first(16));
  auto c = RunReference(dir.path(), ids);  // 24 > 16: long factors for every position
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
  EXPECT_LE(MaxDiff(*a, *b), 1e-12);
  EXPECT_GT(MaxDiff(*c, *a, 0, 16), 1e-6);
  // Phi-3 writes no factor: it is max_position / L0 = 512 / 16.
  FixtureSpec d = Phi3Preset();
  auto dc = ParseReferenceConfig(ConfigJson(d));
  ASSERT_TRUE(dc.ok()) << dc.status();
  EXPECT_DOUBLE_EQ(dc->layers[0].rope.factor, 32.0);
}

TEST(HfReference, PartialRotaryLeavesTheTailDimsUnrotated) {
  // Phi-4-mini style 0.75: rotary 12 of 16 dims, frequencies over d = 12; the full-rotary
  // model at the same theta must differ.
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = Phi4MiniPreset();
  s.rope_scaling = {};
  const Reference partial = MustRun(s, ids, "partial");
  s.partial_rotary_factor = 1.0;
  EXPECT_GT(MaxDiff(MustRun(s, ids, "full_rotary"), partial), 1e-6);
}

// Copies `src` into `dst` with a new config; `edit` may rename or change each tensor, add
// tensors to `added`, and returns false to drop the one it was given.
using TensorEdit = std::function<bool(TensorBlob&, std::vector<TensorBlob>& added)>;
void Rewrite(const std::string& src, const std::string& dst, const std::string& config,
             const TensorEdit& edit) {
  auto ckpt = model::SafetensorsCheckpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<TensorBlob> out;
  for (const std::string& n : ckpt->TensorNames()) {
    auto f = ckpt->Find(n);
    ASSERT_TRUE(f.ok());
    const auto bytes = f->first->Bytes(*f->second);
    TensorBlob b{n, f->second->dtype, f->second->shape, {}};
    b.bytes.assign(reinterpret_cast<const uint8_t*>(bytes.data()),
                   reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
    std::vector<TensorBlob> added;
    if (edit(b, added)) out.push_back(std::move(b));
    for (TensorBlob& a : added) out.push_back(std::move(a));
  }
  std::filesystem::create_directories(dst);
  std::ofstream(dst + "/config.json") << config;
  ASSERT_TRUE(WriteSafetensors(out, dst, 1).ok());
}

// Rows [begin, end) of an F32 matrix blob, as a new blob.
TensorBlob RowSlice(const TensorBlob& m, const std::string& name, int64_t begin, int64_t end) {
  const int64_t cols = m.shape[1];
  TensorBlob r{name, m.dtype, {end - begin, cols}, {}};
  r.bytes.assign(m.bytes.begin() + begin * cols * 4, m.bytes.begin() + end * cols * 4);
  return r;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(HfReference, OneExpertMixtralIsTheDenseMistralWithItsWeights) {
  FixtureSpec s = MixtralPreset();
  s.num_experts = 1;
  s.num_experts_per_tok = 1;
  FixtureDir moe("moe"), dense("dense");
  ASSERT_TRUE(WriteRandomCheckpoint(s, moe.path()).ok());
  FixtureSpec d = MistralPreset(0);
  d.rope_theta = s.rope_theta;
  Rewrite(moe.path(), dense.path(), ConfigJson(d), [](TensorBlob& b, std::vector<TensorBlob>&) {
    if (b.name.find("block_sparse_moe.gate.") != std::string::npos) return false;
    b.name = Replace(b.name, "block_sparse_moe.experts.0.w1", "mlp.gate_proj");
    b.name = Replace(b.name, "block_sparse_moe.experts.0.w2", "mlp.down_proj");
    b.name = Replace(b.name, "block_sparse_moe.experts.0.w3", "mlp.up_proj");
    return true;
  });
  const std::vector<int32_t> ids = TestIds(20, 256);
  auto a = RunReference(moe.path(), ids);
  auto b = RunReference(dense.path(), ids);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_LE(MaxDiff(*a, *b), 1e-12);
}

TEST(HfReference, OneExpertQwen3MoeIsTheDenseQwen3WithItsWeights) {
  FixtureSpec s = Qwen3MoePreset();
  s.num_experts = 1;
  s.num_experts_per_tok = 1;
  s.mlp_only_layers = {};
  s.moe_intermediate_size = s.intermediate_size;
  FixtureDir moe("moe"), dense("dense");
  ASSERT_TRUE(WriteRandomCheckpoint(s, moe.path()).ok());
  FixtureSpec d = Qwen3Preset();
  d.num_hidden_layers = s.num_hidden_layers;
  d.intermediate_size = s.intermediate_size;
  d.tie_word_embeddings = s.tie_word_embeddings;
  d.max_position_embeddings = s.max_position_embeddings;
  Rewrite(moe.path(), dense.path(), ConfigJson(d), [](TensorBlob& b, std::vector<TensorBlob>&) {
    if (b.name.find("mlp.gate.weight") != std::string::npos) return false;
    b.name = Replace(b.name, "mlp.experts.0.", "mlp.");
    return true;
  });
  const std::vector<int32_t> ids = TestIds(20, 256);
  auto a = RunReference(moe.path(), ids);
  auto b = RunReference(dense.path(), ids);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_LE(MaxDiff(*a, *b), 1e-12);
}

TEST(HfReference, NormTopkProbIsANoOpWhenEveryExpertIsChosen) {
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = Qwen3MoePreset();
  s.num_experts_per_tok = s.num_experts;
  s.norm_topk_prob = true;
  const Reference on = MustRun(s, ids, "all_on");
  s.norm_topk_prob = false;
  EXPECT_LE(MaxDiff(MustRun(s, ids, "all_off"), on), 1e-12);
  s = Qwen3MoePreset();  // top-2 of 4: the renormalisation matters
  const Reference k_on = MustRun(s, ids, "k_on");
  s.norm_topk_prob = false;
  EXPECT_GT(MaxDiff(MustRun(s, ids, "k_off"), k_on), 1e-6);
  // Mixtral renormalises unconditionally: top-2 of 4 differs from top-4.
  FixtureSpec m = MixtralPreset();
  const Reference top2 = MustRun(m, ids, "mixtral2");
  m.num_experts_per_tok = 4;
  EXPECT_GT(MaxDiff(MustRun(m, ids, "mixtral4"), top2), 1e-6);
}

TEST(HfReference, GptOssMxfp4EqualsItsDequantisedCheckpoint) {
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = GptOssPreset();
  s.dtype = WeightDtype::kBf16;
  const Reference deq = MustRun(s, ids, "deq");
  s.expert_format = ExpertFormat::kMxfp4;
  EXPECT_LE(MaxDiff(MustRun(s, ids, "mxfp4"), deq), 1e-12);
}

TEST(HfReference, GptOssSwigluClampOnlyBitesOnLargeActivations) {
  const std::vector<int32_t> ids = TestIds(20, 256);
  FixtureSpec s = GptOssPreset();
  const Reference limit7 = MustRun(s, ids, "small7");
  s.swiglu_limit = 1e9;
  EXPECT_LE(MaxDiff(MustRun(s, ids, "small_inf"), limit7), 1e-12);  // |gate|, |up| << 7
  s = GptOssPreset();
  s.mxfp4_scale_exponent = 127;  // weights up to ±6: pre-activations far beyond 7
  const Reference big7 = MustRun(s, ids, "big7");
  s.swiglu_limit = 1e9;
  EXPECT_GT(MaxDiff(MustRun(s, ids, "big_inf"), big7), 1e-6);
}

// Phi-3's fused projections split as [Q | K | V] and [gate | up] are the Llama model.
TEST(HfReference, Phi3FusedProjectionsAreLlamaSplitApart) {
  FixtureSpec s = Phi3Preset();
  s.rope_scaling = {};
  FixtureDir phi("phi3"), llama("llama");
  ASSERT_TRUE(WriteRandomCheckpoint(s, phi.path()).ok());
  FixtureSpec l = LlamaPreset();
  l.rms_norm_eps = s.rms_norm_eps;
  l.max_position_embeddings = s.max_position_embeddings;
  const int64_t qd = 64, kvd = 32, inter = s.intermediate_size;
  Rewrite(phi.path(), llama.path(), ConfigJson(l),
          [&](TensorBlob& b, std::vector<TensorBlob>& added) {
            const size_t cut =
                b.name.find(b.name.find("self_attn.") != std::string::npos ? "self_attn." : "mlp.");
            const std::string p = b.name.substr(0, cut);
            if (b.name.find("qkv_proj") != std::string::npos) {
              added.push_back(RowSlice(b, p + "self_attn.q_proj.weight", 0, qd));
              added.push_back(RowSlice(b, p + "self_attn.k_proj.weight", qd, qd + kvd));
              added.push_back(RowSlice(b, p + "self_attn.v_proj.weight", qd + kvd, qd + 2 * kvd));
              return false;
            }
            if (b.name.find("gate_up_proj") != std::string::npos) {
              added.push_back(RowSlice(b, p + "mlp.gate_proj.weight", 0, inter));
              added.push_back(RowSlice(b, p + "mlp.up_proj.weight", inter, 2 * inter));
              return false;
            }
            return true;
          });
  const std::vector<int32_t> ids = TestIds(20, 256);
  auto a = RunReference(phi.path(), ids);
  auto b = RunReference(llama.path(), ids);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_LE(MaxDiff(*a, *b), 1e-12);
}

// Sinks add exp(sink) to each head's softmax denominator: a sink far below every score
// changes nothing, a large one takes mass from all keys.
TEST(HfReference, GptOssSinksVanishWhenVeryNegative) {
  FixtureSpec s = GptOssPreset();
  FixtureDir src("src");
  ASSERT_TRUE(WriteRandomCheckpoint(s, src.path()).ok());
  auto with_sinks = [&](float value, const std::string& tag) {
    FixtureDir dir(tag);
    Rewrite(src.path(), dir.path(), ConfigJson(s),
            [value](TensorBlob& b, std::vector<TensorBlob>&) {
              if (b.name.find("self_attn.sinks") != std::string::npos) {
                for (size_t i = 0; i < b.bytes.size(); i += 4) std::memcpy(&b.bytes[i], &value, 4);
              }
              return true;
            });
    auto r = RunReference(dir.path(), TestIds(20, 256));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : Reference{};
  };
  const Reference far1 = with_sinks(-40.0f, "far1"), far2 = with_sinks(-80.0f, "far2");
  const Reference big = with_sinks(3.0f, "big");
  auto orig = RunReference(src.path(), TestIds(20, 256));
  ASSERT_TRUE(orig.ok());
  EXPECT_LE(MaxDiff(far1, far2), 1e-12);
  EXPECT_GT(MaxDiff(big, far1), 1e-6);
  EXPECT_GT(MaxDiff(*orig, far1), 1e-6);
}

TEST(HfReference, DerivedLayerPatternsEqualTheWrittenLayerTypes) {
  const std::vector<int32_t> ids = TestIds(24, 256);
  for (FixtureSpec s : {Gemma2Preset(), Gemma3Preset(), GptOssPreset()}) {
    SCOPED_TRACE(ModelType(s.arch));
    const Reference written = MustRun(s, ids, "written");
    s.write_layer_types = false;
    EXPECT_LE(MaxDiff(MustRun(s, ids, "derived"), written), 1e-12);
  }
}

TEST(HfReference, ErrorsNameTheProblem) {
  FixtureDir dir("err");
  FixtureSpec s = LlamaPreset();
  s.tie_word_embeddings = true;
  ASSERT_TRUE(WriteRandomCheckpoint(s, dir.path()).ok());
  // A checkpoint tensor the config does not account for.
  json c = json::parse(ConfigJson(s));
  c["tie_word_embeddings"] = false;
  std::ofstream(dir.path() + "/config.json") << c.dump();
  auto r = RunReference(dir.path(), TestIds(4, 256));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lm_head.weight"), std::string::npos) << r.status();
  // A token outside the vocabulary.
  std::ofstream(dir.path() + "/config.json") << ConfigJson(s);
  const std::vector<int32_t> bad = {1, 300};
  r = RunReference(dir.path(), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("300"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::testing::hf
