// Policy settings and validation, and the baselines' rounds: streamingllm keeps sinks and
// the recent window, h2o keeps the recent half plus the heaviest accumulated attention mass,
// snapkv keeps the observation window plus what the window's queries attend to (against an
// independent float64 reference), each with the same compaction and accounting.
#include <gtest/gtest.h>

#include <limits>

#include <set>

#include "absl/strings/match.h"
#include "compression/h2o_policy.h"
#include "compression/policy_factory.h"
#include "compression/snapkv_policy.h"
#include "compression_test_util.h"
#include "kernels/cpu/rope.h"

namespace kvserve::compression {
namespace {

using config::CompressionPolicyKind;
using testing::InvFreq;
using testing::MakeContext;
using testing::TestPool;
using testing::TestSeq;
using testing::TickClock;

constexpr int kQHeads = 4;

cache::KvLayout Layout() {
  cache::KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 16;
  l.block_size = 4;
  l.dtype = config::KvDtype::kFp32;
  return l;
}

PolicyParams Params(CompressionPolicyKind kind, int64_t budget, int64_t beta, int64_t prompt, bool protect) {
  PolicyParams p;
  p.kind = kind;
  p.budget = budget;
  p.divide_length = beta;
  p.prompt_len = prompt;
  p.protect_prompt = protect;
  return p;
}

struct Harness {
  Harness() : layout(Layout()), inv_freq(InvFreq(layout.head_dim)), pool(layout, 64, 17) {}
  std::unique_ptr<CompressionPolicy> Make(const PolicyParams& p) {
    auto r = CreatePolicy(p, MakeContext(layout, kQHeads, inv_freq, nullptr, &clock));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  TestSeq NewSeq(const CompressionPolicy& policy, int64_t capacity) {
    TestSeq s;
    s.pool = &pool;
    s.table = pool.Allocate(capacity);
    s.slots = policy.NewSlotState();
    return s;
  }
  std::vector<int32_t> Positions(const TestSeq& s, int layer, int head) {
    auto p = s.slots.positions(layer, head);
    return {p.begin(), p.end()};
  }
  cache::KvLayout layout;
  std::vector<float> inv_freq;
  TestPool pool;
  TickClock clock;
};

// Top-k of scores (ties to the lowest index), as ascending indices plus `base`.
std::vector<int32_t> TopK(const std::vector<double>& s, int64_t k, int64_t base) {
  std::vector<int32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  for (int32_t& i : idx) i += static_cast<int32_t>(base);
  return idx;
}

// ---------------------------------------------------------------- settings

TEST(PolicyParams, ValidationNamesTheRequestField) {
  PolicyParams p = Params(CompressionPolicyKind::kTriAttention, 100, 16, 90, true);
  EXPECT_TRUE(ValidateParams(p).ok());
  p.budget = 90;
  absl::Status st = ValidateParams(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "kv_compression.budget (90) must exceed the protected prefix (90 tokens)"))
      << st;
  p.protect_prompt = false;
  EXPECT_TRUE(ValidateParams(p).ok()) << "an unpinned prompt may exceed the budget";

  p = Params(CompressionPolicyKind::kSnapKv, 100, 16, 40, true);
  p.window = 60;
  st = ValidateParams(p);
  EXPECT_TRUE(absl::StrContains(st.message(), "kv_compression.budget (100)")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "window (60 tokens)")) << st;
  p.window = 0;
  EXPECT_TRUE(absl::StrContains(ValidateParams(p).message(), "kv_compression.window")) << ValidateParams(p);

  // streamingllm honours the budget: sinks + recent window = B, so B must exceed the sinks.
  p = Params(CompressionPolicyKind::kStreamingLlm, 4, 16, 0, false);
  p.sinks = 4;
  EXPECT_TRUE(absl::StrContains(ValidateParams(p).message(), "kv_compression.budget (4)")) << ValidateParams(p);
  p.budget = 12;
  EXPECT_TRUE(ValidateParams(p).ok());
  EXPECT_EQ(RecentWindow(p), 8);

  p = Params(CompressionPolicyKind::kH2O, 100, -1, 4, true);
  EXPECT_TRUE(absl::StrContains(ValidateParams(p).message(), "kv_compression.divide_length"));
  p.divide_length = 0;
  EXPECT_TRUE(ValidateParams(p).ok()) << "0 selects the budget-scaled default slack";
  p = Params(CompressionPolicyKind::kAuto, 100, 16, 4, true);
  EXPECT_TRUE(absl::StrContains(ValidateParams(p).message(), "kv_compression.policy"));
  p = Params(CompressionPolicyKind::kFull, -5, -5, 4, true);
  EXPECT_TRUE(ValidateParams(p).ok()) << "full ignores every knob";

  Harness h;
  auto bad = CreatePolicy(Params(CompressionPolicyKind::kH2O, 3, 8, 5, true),
                          MakeContext(h.layout, kQHeads, h.inv_freq, nullptr, &h.clock));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "kv_compression.budget"));
}

TEST(PolicyParams, FromConfigAndPerPolicyGeometry) {
  config::CompressionConfig c;
  c.budget = 300;
  c.divide_length = 32;
  c.window = 16;
  c.sinks = 2;
  c.protect_prompt = true;
  const PolicyParams p = ParamsFromConfig(c, CompressionPolicyKind::kStreamingLlm, 10);
  EXPECT_EQ(p.budget, 300);
  EXPECT_EQ(p.divide_length, 32);
  EXPECT_EQ(p.window, 16);
  EXPECT_EQ(p.sinks, 2);
  EXPECT_EQ(p.prompt_len, 10);
  EXPECT_EQ(FirstEvictableSlot(p), 10);
  EXPECT_EQ(TargetLength(p), 300) << "every policy compresses back to the budget";
  EXPECT_EQ(RecentWindow(p), 290);
  PolicyParams q = p;
  q.protect_prompt = false;
  EXPECT_EQ(FirstEvictableSlot(q), 2);  // the sinks
  EXPECT_EQ(TargetLength(q), 300);
  EXPECT_EQ(RecentWindow(q), 298);
  q.kind = CompressionPolicyKind::kTriAttention;
  EXPECT_EQ(FirstEvictableSlot(q), 2) << "triattention keeps the sinks of an unprotected prompt";
  EXPECT_EQ(TargetLength(q), 300);
  EXPECT_EQ(RecentWindow(q), 16);
  q.protect_prompt = true;
  EXPECT_EQ(FirstEvictableSlot(q), 10);
  EXPECT_EQ(RecentWindow(q), 16) << "an explicit window is honoured with a protected prompt too";
  q.window = -1;
  EXPECT_EQ(RecentWindow(q), 0) << "by default a protected prompt is the paper's setting: no window";
}

// ---------------------------------------------------------------- streamingllm

TEST(StreamingLlm, KeepsSinksAndRecentWindowInEveryRow) {
  Harness h;
  PolicyParams p = Params(CompressionPolicyKind::kStreamingLlm, 8, 4, 3, false);
  p.sinks = 2;  // + 6 recent = the budget
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(11);
  EXPECT_FALSE(policy->Due(11, 11));
  seq.Append(1);
  EXPECT_TRUE(policy->Due(12, 12));
  const std::vector<std::byte> k6 = h.pool.RawRow(seq.table, 1, 0, 1, 6);
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_phys_len, 8);
  EXPECT_EQ(r->evicted_positions, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(r->evicted_prompt_tokens, 1);  // position 2 of a 3-token prompt
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv) EXPECT_EQ(h.Positions(seq, l, kv), (std::vector<int32_t>{0, 1, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(h.pool.RawRow(seq.table, 1, 0, 1, 2), k6) << "slot 6 moved to slot 2";

  // With the prompt pinned, the prompt replaces the sinks.
  PolicyParams q = p;
  q.protect_prompt = true;
  q.prompt_len = 5;
  q.budget = 11;
  auto pinned = h.Make(q);
  EXPECT_EQ(pinned->target_length(), 11);
  TestSeq s2 = h.NewSeq(*pinned, 40);
  s2.Append(15);
  auto r2 = pinned->Run(s2.Input());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(h.Positions(s2, 0, 0), (std::vector<int32_t>{0, 1, 2, 3, 4, 9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(r2->evicted_prompt_tokens, 0);
}

// ---------------------------------------------------------------- h2o

class H2OTest : public ::testing::TestWithParam<bool> {};

TEST_P(H2OTest, KeepsRecentHalfAndHeaviestAccumulatedMass) {
  const bool normalize = GetParam();
  Harness h;
  PolicyParams p = Params(CompressionPolicyKind::kH2O, 12, 6, 4, true);
  p.h2o_normalize_by_lifetime = normalize;
  auto policy = h.Make(p);
  EXPECT_TRUE(policy->needs().attention_mass);
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(18);
  ASSERT_TRUE(seq.slots.tracks_mass());

  // Two steps of observer output for a batch of 2 sequences; ours is sequence 1.
  const int64_t stride = 20;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> total(2 * 2 * 18, 0.0f);  // [layer][head][slot]
  for (int step = 0; step < 2; ++step) {
    std::vector<float> buf(2 * 2 * 2 * stride, 1e6f);  // [L][S][Hkv][stride], junk elsewhere
    const MassView mv = MassView::FromObservers(buf, stride, /*num_seqs=*/2, /*seq_index=*/1, 2, 18);
    for (int l = 0; l < 2; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int i = 0; i < 18; ++i) {
          const float m = u(h.pool.rng());
          buf[((l * 2 + 1) * 2 + kv) * stride + i] = m;
          total[(l * 2 + kv) * 18 + i] += m;
        }
    EXPECT_EQ(mv.data, buf.data() + 2 * stride);
    policy->ObserveAttentionMass(seq.slots, mv);
  }
  std::vector<std::vector<int32_t>> want(4);
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<double> s;
      for (int i = 4; i < 14; ++i) {  // K = 8: recent 4 = [14, 18), heavy 4 among [4, 14)
        double m = total[(l * 2 + kv) * 18 + i];
        if (normalize) m /= static_cast<double>(18 - i);  // t - position
        s.push_back(m);
      }
      std::vector<int32_t> keep = {0, 1, 2, 3};
      for (int32_t i : TopK(s, 4, 4)) keep.push_back(i);
      for (int32_t i = 14; i < 18; ++i) keep.push_back(i);
      want[l * 2 + kv] = keep;
    }
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_phys_len, 12);
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      EXPECT_EQ(h.Positions(seq, l, kv), want[l * 2 + kv]) << "layer " << l << " head " << kv;
      // The accumulated mass moved with the rows.
      for (int i = 0; i < 12; ++i) {
        EXPECT_EQ(seq.slots.mass(l, kv)[i], total[(l * 2 + kv) * 18 + want[l * 2 + kv][i]]);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, H2OTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? std::string("norm") : std::string("sum"); });

// ---------------------------------------------------------------- snapkv

// Independent SnapKV selection for one (layer, KV head): softmax of the window's rotated
// queries over the keys each saw (by position), summed, avg-pooled (kernel 5, zero padding,
// / 5), averaged over the group; window kept.
std::vector<int32_t> SnapKvReference(const TestSeq& seq, int layer, int kv, const std::vector<float>& rotated_q,
                                     const std::vector<int32_t>& qpos, int64_t lo, int64_t k, int64_t w) {
  const int d = 16;
  const int group = kQHeads / 2;
  const int64_t n = seq.slots.size();
  const int64_t prefix_end = n - w;
  const auto pos = seq.slots.positions(layer, kv);
  std::vector<double> mean(static_cast<size_t>(prefix_end), 0.0);
  for (int g = 0; g < group; ++g) {
    const int hq = kv * group + g;
    std::vector<double> a(static_cast<size_t>(prefix_end), 0.0);
    for (size_t r = 0; r < qpos.size(); ++r) {
      std::vector<double> logit;
      for (int64_t j = 0; j < n && pos[j] <= qpos[r]; ++j) {
        const std::vector<float> key = seq.pool->Read(seq.table, layer, 0, kv, j);
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(rotated_q[r * kQHeads * d + hq * d + i]) * key[i];
        logit.push_back(dot / 4.0);  // sqrt(16)
      }
      const double mx = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (double x : logit) z += std::exp(x - mx);
      for (int64_t j = 0; j < std::min<int64_t>(prefix_end, static_cast<int64_t>(logit.size())); ++j) {
        a[j] += std::exp(logit[j] - mx) / z;
      }
    }
    for (int64_t j = 0; j < prefix_end; ++j) {
      double acc = 0;
      for (int64_t o = j - 2; o <= j + 2; ++o)
        if (o >= 0 && o < prefix_end) acc += a[o];
      mean[j] += acc / 5.0 / group;
    }
  }
  std::vector<double> cand(mean.begin() + lo, mean.end());
  std::vector<int32_t> keep;
  for (int64_t j = 0; j < lo; ++j) keep.push_back(pos[j]);
  for (int32_t i : TopK(cand, k - w, lo)) keep.push_back(pos[i]);
  for (int64_t j = prefix_end; j < n; ++j) keep.push_back(pos[j]);
  return keep;  // positions, [0, lo + k)
}

TEST(SnapKv, CompressesThePromptAtTheEndOfPrefillAndAgainInDecode) {
  Harness h;
  const int64_t prompt = 30, budget = 16, w = 4, beta = 8;
  PolicyParams p = Params(CompressionPolicyKind::kSnapKv, budget, beta, prompt, false);
  p.window = w;
  auto policy = h.Make(p);
  EXPECT_TRUE(policy->needs().pre_rope_queries);
  TestSeq seq = h.NewSeq(*policy, 64);

  const int q_size = kQHeads * 16;
  const int64_t q_stride = q_size + 5;  // rows of a fused QKV buffer carry more than Q
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<float>> pre_q;  // every token's pre-RoPE query row (both layers share it)
  auto feed = [&](int64_t count) {       // a forward step over `count` new tokens
    std::vector<float> rows(static_cast<size_t>(count * q_stride));
    std::vector<int32_t> positions;
    for (int64_t t = 0; t < count; ++t) {
      for (int i = 0; i < q_size; ++i) rows[t * q_stride + i] = nd(h.pool.rng());
      pre_q.emplace_back(rows.begin() + t * q_stride, rows.begin() + t * q_stride + q_size);
      positions.push_back(static_cast<int32_t>(seq.next_position + t));
    }
    seq.Append(count);
    // Both layers see the same rows (layer_stride 0), once per step.
    policy->ObserveQueries(seq.slots, QueryView{rows.data(), 0, q_stride, positions.data(), count});
  };
  auto reference = [&](int64_t lo) {
    std::vector<float> rq;
    std::vector<int32_t> qpos;
    for (int64_t t = seq.next_position - w; t < seq.next_position; ++t) {
      rq.insert(rq.end(), pre_q[t].begin(), pre_q[t].end());
      qpos.push_back(static_cast<int32_t>(t));
    }
    std::vector<float> cs(static_cast<size_t>(w) * 16);
    kernels::cpu::RopeCosSin(qpos.data(), w, h.inv_freq.data(), 8, cs.data());
    kernels::cpu::ApplyRope(rq.data(), w, kQHeads, 16, q_size, cs.data());
    std::vector<std::vector<int32_t>> want;
    for (int l = 0; l < 2; ++l)
      for (int kv = 0; kv < 2; ++kv) want.push_back(SnapKvReference(seq, l, kv, rq, qpos, lo, budget - lo, w));
    return want;
  };

  // Chunked prefill: not due between chunks, due right after the last one.
  feed(20);
  EXPECT_FALSE(policy->Due(20, 20));
  feed(10);
  EXPECT_TRUE(policy->Due(30, 30));
  auto want = reference(0);
  auto r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_phys_len, budget);
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv) EXPECT_EQ(h.Positions(seq, l, kv), want[l * 2 + kv]) << "prefill round " << l << kv;
  EXPECT_EQ(r->evicted_prompt_tokens, static_cast<int64_t>(r->evicted_positions.size()));

  // Decode: due again at budget + beta, scored with the last w decode queries.
  for (int i = 0; i < 7; ++i) feed(1);
  EXPECT_FALSE(policy->Due(seq.slots.size(), seq.next_position));
  feed(1);
  EXPECT_TRUE(policy->Due(seq.slots.size(), seq.next_position));
  want = reference(0);
  r = policy->Run(seq.Input());
  ASSERT_TRUE(r.ok()) << r.status();
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv) EXPECT_EQ(h.Positions(seq, l, kv), want[l * 2 + kv]) << "decode round " << l << kv;
}

// A backend that scores SnapKV where its KV lives (CudaKvAccess): the policy hands it the
// window (queries, the prefix each row saw, where the window starts) and keeps the top-k of
// the scores it returns, reading no key itself.
class SnapScoringAccess final : public testing::DelegatingKvAccess {
 public:
  // batched: also offers ScoreSnapKvLayer (each head scored as below).
  explicit SnapScoringAccess(HostKvAccess& host, bool batched = false) : DelegatingKvAccess(host), batched_(batched) {}
  bool ScoresSnapKvBatched() const override { return batched_; }
  bool ScoreSnapKvLayer(std::span<const int32_t> table, int layer, int64_t lo, int64_t n,
                        std::span<const SnapKvWindow> ws, std::span<double> rows) override {
    ++layer_calls;
    const auto width = static_cast<size_t>(n - lo);
    for (size_t kv = 0; kv < ws.size(); ++kv) {
      ScoreSnapKv(table, layer, static_cast<int>(kv), lo, n, ws[kv], rows.subspan(kv * width, width));
    }
    return true;
  }
  bool ScoreSnapKv(std::span<const int32_t>, int layer, int kv_head, int64_t lo, int64_t n, const SnapKvWindow& w,
                   std::span<double> row) override {
    windows.push_back(w);
    window_seen.emplace_back(w.seen.begin(), w.seen.end());
    for (int64_t j = lo; j < n; ++j) {
      row[static_cast<size_t>(j - lo)] = j < w.prefix_end ? static_cast<double>((j * 7919 + layer * 13 + kv_head) % 101)
                                                          : std::numeric_limits<double>::infinity();
    }
    return true;
  }
  std::vector<SnapKvWindow> windows;
  std::vector<std::vector<int64_t>> window_seen;
  int layer_calls = 0;

 private:
  bool batched_;
};

// batched: the backend scores a layer's heads in one call (CudaKvAccess: one synchronisation
// per layer); the windows, their order and the tokens kept are the per-head path's.
void CheckBackendScoresSnapKv(bool batched) {
  Harness h;
  const int64_t prompt = 30, budget = 16, w = 4;
  PolicyParams p = Params(CompressionPolicyKind::kSnapKv, budget, 8, prompt, false);
  p.window = w;
  auto policy = h.Make(p);
  TestSeq seq = h.NewSeq(*policy, 64);
  const int q_size = kQHeads * 16;
  std::vector<float> rows(static_cast<size_t>(prompt * q_size), 0.5f);
  std::vector<int32_t> positions(static_cast<size_t>(prompt));
  std::iota(positions.begin(), positions.end(), 0);
  seq.Append(prompt);
  policy->ObserveQueries(seq.slots, QueryView{rows.data(), 0, q_size, positions.data(), prompt});
  ASSERT_TRUE(policy->Due(prompt, prompt));
  SnapScoringAccess access(h.pool.access(), batched);
  RoundInput in = seq.Input();
  in.kv = &access;
  auto r = policy->Run(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.reads, 0) << "the policy read keys although the backend scored them";
  ASSERT_EQ(access.windows.size(), 4u) << "one window per (layer, KV head)";
  EXPECT_EQ(access.layer_calls, batched ? 2 : 0) << "one batched call per layer";
  for (size_t c = 0; c < access.windows.size(); ++c) {
    const SnapKvWindow& win = access.windows[c];
    EXPECT_EQ(win.group, kQHeads / 2);
    EXPECT_EQ(win.num_queries, w);
    EXPECT_EQ(win.q_stride, q_size);
    EXPECT_EQ(win.prefix_end, prompt - w);
    EXPECT_EQ(win.pool_kernel, kSnapKvPoolKernel);
    EXPECT_DOUBLE_EQ(win.scale, 1.0 / 4.0);  // 1 / sqrt(head_dim 16)
    // Window row r is position prompt - w + r: it saw every slot up to itself.
    EXPECT_EQ(access.window_seen[c], (std::vector<int64_t>{27, 28, 29, 30}));
  }
  // Kept: the top-(budget - w) of the returned scores, then the window.
  for (int l = 0; l < 2; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<double> scores;
      for (int64_t j = 0; j < prompt - w; ++j) scores.push_back(static_cast<double>((j * 7919 + l * 13 + kv) % 101));
      std::vector<int32_t> want = TopK(scores, budget - w, 0);
      for (int64_t j = prompt - w; j < prompt; ++j) want.push_back(static_cast<int32_t>(j));
      EXPECT_EQ(h.Positions(seq, l, kv), want) << "layer " << l << " kv " << kv;
    }
  }
}

TEST(SnapKv, ABackendThatScoresInPlaceGetsTheWindowAndNoKeyIsRead) { CheckBackendScoresSnapKv(false); }

TEST(SnapKv, ABackendThatScoresALayerAtOnceGetsEveryHeadsWindow) { CheckBackendScoresSnapKv(true); }

TEST(SnapKv, PinnedPromptIsNeverCompressedAtPrefill) {
  Harness h;
  PolicyParams p = Params(CompressionPolicyKind::kSnapKv, 16, 8, 10, true);
  p.window = 4;
  auto policy = h.Make(p);
  EXPECT_FALSE(policy->Due(10, 10)) << "prompt fits the budget";
  EXPECT_TRUE(policy->Due(24, 24));
  TestSeq seq = h.NewSeq(*policy, 40);
  seq.Append(24);
  auto r = policy->Run(seq.Input());  // no queries were observed
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "ObserveQueries")) << r.status();
  EXPECT_EQ(seq.slots.size(), 24);
}

}  // namespace
}  // namespace kvserve::compression
